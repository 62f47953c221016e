# Finds stoker's dependencies, all from Debian 12 packages (scripts/install-deps.sh installs them), and exposes each
# as an imported target so the component CMakeLists only name targets.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(cppzmq REQUIRED)                 # cppzmq-dev; brings the libzmq target
find_package(CapnProto REQUIRED)              # libcapnp-dev + capnproto (the schema compiler)
find_package(prometheus-cpp REQUIRED)         # prometheus-cpp-dev
find_package(JPEG REQUIRED)                   # libjpeg62-turbo-dev: the libjpeg API of libjpeg-turbo
pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)  # libturbojpeg0-dev: lossless crops (tjTransform)
find_package(CURL 7.75 REQUIRED)              # libcurl4-openssl-dev: object storage (CURLOPT_AWS_SIGV4 since 7.75)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)  # libsodium-dev: BLAKE2b (data tickets), X25519 (seal)
find_package(OpenSSL 3 REQUIRED)              # libssl-dev: HKDF and AES-256-GCM for sealed batches (auth/seal.h)
# intel-ipsec-mb (libipsec-mb-dev, x86-64 only): AES-256-GCM for sealed batches at about four times OpenSSL 3.0's
# speed per core (AVX-512/VAES). Optional: without it auth/seal.cc seals with OpenSSL's.
find_path(IPSEC_MB_INCLUDE_DIR intel-ipsec-mb.h)
find_library(IPSEC_MB_LIBRARY IPSec_MB)
if(IPSEC_MB_INCLUDE_DIR AND IPSEC_MB_LIBRARY)
  set(STOKER_WITH_IPSEC_MB ON)
else()
  set(STOKER_WITH_IPSEC_MB OFF)
endif()

# libjpeg-turbo's crop and skip entry points are what the worker's decoder is built on; refuse a plain libjpeg.
include(CheckSymbolExists)
set(CMAKE_REQUIRED_INCLUDES ${JPEG_INCLUDE_DIRS})
set(CMAKE_REQUIRED_LIBRARIES ${JPEG_LIBRARIES})
check_symbol_exists(jpeg_crop_scanline "stdio.h;jpeglib.h" STOKER_HAVE_JPEG_CROP)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)
if(NOT STOKER_HAVE_JPEG_CROP)
  message(FATAL_ERROR "libjpeg without jpeg_crop_scanline: install libjpeg62-turbo-dev (libjpeg-turbo >= 1.5)")
endif()

# OpenCV by component. Debian ships no CMake config without the umbrella libopencv-dev, so find the pieces.
find_path(OpenCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4 REQUIRED)
function(stoker_find_opencv_module module required)
  find_library(OpenCV_${module}_LIBRARY NAMES opencv_${module})
  if(OpenCV_${module}_LIBRARY)
    add_library(opencv::${module} UNKNOWN IMPORTED)
    set_target_properties(opencv::${module} PROPERTIES
      IMPORTED_LOCATION ${OpenCV_${module}_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${OpenCV_INCLUDE_DIR})
  elseif(required)
    message(FATAL_ERROR "OpenCV module ${module} not found: install libopencv-${module}-dev")
  endif()
endfunction()
stoker_find_opencv_module(core TRUE)
stoker_find_opencv_module(imgproc TRUE)
stoker_find_opencv_module(imgcodecs FALSE)
target_link_libraries(opencv::imgproc INTERFACE opencv::core)

# imgcodecs decodes PNG and other non-JPEG formats. It is optional so that a worker can be built whose runtime
# libraries fit on a machine without Debian's GDAL (imgcodecs depends on it); such a worker quarantines non-JPEG
# samples with reason "unsupported_format".
if(TARGET opencv::imgcodecs)
  option(STOKER_WITH_IMGCODECS "Decode non-JPEG images with OpenCV imgcodecs" ON)
else()
  set(STOKER_WITH_IMGCODECS OFF)
endif()
if(STOKER_WITH_IMGCODECS)
  target_link_libraries(opencv::imgcodecs INTERFACE opencv::imgproc)
endif()
