# The wheel's tags: the package is pure Python (ctypes), but it carries compiled libraries (stoker/lib), so its wheel
# is for any Python 3 on this platform only: py3-none-<platform>. Everything else is in pyproject.toml.
from setuptools import setup
from wheel.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


setup(cmdclass={"bdist_wheel": PlatformWheel})
