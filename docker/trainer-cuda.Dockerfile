# The trainer base image for GPU machines: a CUDA runtime image carrying stoker's client library (libstoker.so with
# its headers and CMake package, built with its CUDA path), the C ABI and the Python package (/opt/stoker/python, on
# PYTHONPATH; the package's libstoker_c.so carries the libraries it loads next to it) and the `stoker` CLI, for
# training images to build FROM (they add Python and PyTorch). Its layout is the CPU trainer's (docker/Dockerfile --target trainer).
#   DOCKER_BUILDKIT=1 docker build --network=host -f docker/trainer-cuda.Dockerfile -t stoker-trainer:0.1.0 .
# It needs NVIDIA's CUDA runtime image from a registry (nvidia/cuda), so it cannot be built offline; the CPU images
# can (docker/README.md).
#
# The build runs on Debian 12 like every other stoker build (scripts/install-deps.sh, plus nvcc from NVIDIA's
# Debian 12 CUDA repository). The runtime is NVIDIA's CUDA runtime image, which is Ubuntu: the Debian-built binaries
# bring the shared libraries they load along (docker/stage-build.sh --bundle-libs) — the same bundle the GPU
# benchmarks run from (scripts/bundle-gpu.sh), minus the C and C++ runtime, which the newer Ubuntu provides. The
# client links the CUDA runtime statically; the driver comes from the host through the NVIDIA container toolkit.
ARG DEBIAN_IMAGE=debian:bookworm
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04

FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/
RUN apt-get update -q && apt-get install -y -q --no-install-recommends ca-certificates curl \
 && curl -fsSLo /tmp/cuda-keyring.deb \
      https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
 && dpkg -i /tmp/cuda-keyring.deb && apt-get update -q \
 && apt-get install -y -q --no-install-recommends cuda-nvcc-13-0 cuda-cudart-dev-13-0 \
 && STOKER_DEPS=build scripts/install-deps.sh && rm -rf /var/lib/apt/lists/* /tmp/cuda-keyring.deb
COPY . .
RUN STOKER_DEPS=build STOKER_BUILD_TYPE=Release scripts/build.sh -DSTOKER_BUILD_TESTS=OFF -DSTOKER_BUILD_BENCH=OFF \
      -DSTOKER_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda-13.0/bin/nvcc -DSTOKER_WITH_IMGCODECS=OFF \
 && docker/stage-build.sh --bundle-libs build /opt/stoker \
 && rm /opt/stoker/bin/stoker-coordinator /opt/stoker/bin/stoker-worker

FROM ${CUDA_RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="stoker-trainer" \
      org.opencontainers.image.source="https://github.com/stoker-project/stoker" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
COPY --from=build /opt/stoker /opt/stoker
ENV PATH=/opt/stoker/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/stoker/lib \
    PYTHONPATH=/opt/stoker/python \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# Training images usually add their framework and code and run as their own user; this one defaults to non-root.
USER 65532:65532
EXPOSE 9402
CMD ["stoker", "--help"]
