"""Build script: maps the top-level folders into the `logstore` namespace and
compiles the Cython sources in native/ into `logstore.native`."""
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))

# Only folders that exist are mapped: layers are added by later work.
LAYERS = {"logstore": "logstore", "logstore.native": "native",
          "logstore.broker": "broker", "logstore.spark": "spark"}
package_dir = {pkg: src for pkg, src in LAYERS.items()
               if os.path.isdir(os.path.join(HERE, src))}


def packages():
    found = []
    for pkg, src in package_dir.items():
        for root, dirs, files in os.walk(os.path.join(HERE, src)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if "__init__.py" in files:
                rel = os.path.relpath(root, os.path.join(HERE, src))
                found.append(pkg if rel == "." else pkg + "." + rel.replace(os.sep, "."))
    return found


extensions = [
    Extension(
        "logstore.native." + name[:-4],
        [os.path.join("native", name)],
        include_dirs=["native"],
        extra_compile_args=["-O3"],
    )
    for name in sorted(os.listdir(os.path.join(HERE, "native")))
    if name.endswith(".pyx")
]

setup(
    package_dir=package_dir,
    packages=packages(),
    package_data={"logstore.native": ["*.pyi", "*.pxi", "*.h", "*.LICENSE"]},
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    ),
    zip_safe=False,
)
