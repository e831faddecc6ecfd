"""Build script: maps the top-level folders into the `logstore` namespace and
compiles the Cython sources in native/ into `logstore.native`.

Cython runs only when extensions are built, so making an sdist writes nothing
into native/: the sdist carries the Cython sources (MANIFEST.in), not generated
C, and an install from it cythonizes and compiles. A wheel carries the compiled
modules, their `.pyi` stubs and the licence and version of vendored xxHash
(native/vendor/xxhash/), and none of the sources."""
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

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


# -O3 unless CFLAGS names a level: tests/packaging builds at -O0, since it checks
# what gets packaged and installed, not how fast it runs.
OPTIMIZE = [] if any(flag.startswith("-O") for flag in os.environ.get("CFLAGS", "").split()) else ["-O3"]

# The C headers the modules include: a change to one recompiles them (Cython tracks only its own includes).
HEADERS = sorted(os.path.join("native", name) for name in os.listdir(os.path.join(HERE, "native"))
                 if name.endswith(".h"))

extensions = [
    Extension(
        "logstore.native." + name[:-4],
        [os.path.join("native", name)],
        include_dirs=["native"],
        extra_compile_args=OPTIMIZE,
        depends=HEADERS,
    )
    for name in sorted(os.listdir(os.path.join(HERE, "native")))
    if name.endswith(".pyx")
]


class CythonBuildExt(build_ext):
    """build_ext that cythonizes when it runs (an sdist only lists the sources), one compiler per core."""

    def finalize_options(self):
        if self.parallel is None:  # `-j N` overrides
            self.parallel = os.cpu_count() or 1
        super().finalize_options()

    def run(self):
        from Cython.Build import cythonize

        generated = cythonize(
            self.extensions,
            # The modules are named logstore.native.*, their sources live in native/: shared .pxd
            # files (batch_header.pxd) are cimported by their bare name from there.
            include_path=[os.path.join(HERE, "native")],
            compiler_directives={
                "language_level": 3,
                "boundscheck": False,
                "wraparound": False,
                "cdivision": True,
                "initializedcheck": False,
            },
        )
        # The C sources go into the extensions setuptools has already prepared.
        sources = {ext.name: ext.sources for ext in generated}
        for ext in self.extensions:
            ext.sources = sources[ext.name]
        super().run()


setup(
    package_dir=package_dir,
    packages=packages(),
    # Vendored C (native/vendor/) travels as its licence and version note, never as source.
    # py.typed (PEP 561): checkers read the inline annotations and, for logstore.native, the .pyi stubs.
    package_data={"logstore": ["py.typed"], "logstore.native": ["*.pyi", "vendor/*/LICENSE", "vendor/*/VERSION"]},
    # The build's inputs and outputs that the sdist or an in-place build leaves in native/.
    exclude_package_data={"logstore.native": ["*.pyx", "*.pxi", "*.pxd", "*.h", "*.c", "*.html"]},
    ext_modules=extensions,
    cmdclass={"build_ext": CythonBuildExt},
    zip_safe=False,
)
