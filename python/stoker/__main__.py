"""`python -m stoker --version`: the package's version and the libstoker_c.so it loads (path and C API version), so
that an installed package can be checked in one line: that it finds its library and the libraries beside it."""
import argparse
import sys

from . import __version__, _capi


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m stoker", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and the library loaded (default)")
    parser.parse_args(argv)
    try:
        lib = _capi.lib()
    except ImportError as e:
        print(f"stoker {__version__}: {e}", file=sys.stderr)
        return 1
    print(f"stoker {__version__} (C API {lib.stoker_c_api_version()}, {lib._name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
