"""Only what pyproject.toml cannot say: the ``stepscope-auto.pth`` start-up line goes to the top of
site-packages (where Python reads .pth files), so that ``STEPSCOPE_AUTO=1`` works after a plain
``pip install`` with nothing on ``PYTHONPATH``."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PTH = "stepscope-auto.pth"


class BuildWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH), preserve_mode=0)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildWithPth})
