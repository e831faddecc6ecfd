#!/bin/sh
# Builds librdkafka's examples/rdkafka_performance (a C client) for the broker benches in bench/c_client.py
# and bench/parked_fetch.py: Python clients saturate before the broker does.
#
# It compiles against Debian's librdkafka-dev (2.0.2 on bookworm) with the source package's src/ headers and
# config.h, but runs against the newer librdkafka inside the confluent-kafka wheel (2.0.2 cannot talk to
# tansu): build/bench-tools/lib/librdkafka.so.1 links to the wheel's copy, and the runners put that
# directory on LD_LIBRARY_PATH. libjemalloc2 is installed because with glibc's malloc the consumer is
# lock-bound on two cores and hides the brokers' difference (the runners preload it).
#
# Idempotent: does nothing when the binary, the library link and jemalloc are in place.
# Usage: bench/tools/build_rdkafka_performance.sh [VENV]   (VENV defaults to .venv)
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# Absolute, since the library link made below must not depend on the directory it sits in.
VENV=$(cd "${1:-$ROOT/.venv}" && pwd)
OUT=$ROOT/build/bench-tools
BIN=$OUT/rdkafka_performance
LIBDIR=$OUT/lib
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2

wheel_lib() {
	# The wheel's vendored librdkafka carries a hashed soname (auditwheel), hence the glob.
	ls "$VENV"/lib/python3*/site-packages/confluent_kafka.libs/librdkafka-*.so* 2>/dev/null | head -n 1
}

if [ -x "$BIN" ] && [ -e "$LIBDIR/librdkafka.so.1" ] && [ -e "$JEMALLOC" ]; then
	exit 0
fi

WHEEL_LIB=$(wheel_lib)
if [ -z "$WHEEL_LIB" ]; then
	echo "no librdkafka in $VENV's confluent-kafka wheel: run make build first" >&2
	exit 1
fi

# Root needs no sudo; as a user, apt-get goes through sudo.
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
command -v apt-get >/dev/null 2>&1 || { echo "apt-get missing: install librdkafka-dev and its source by hand" >&2; exit 1; }

# deb-src lines for the same suites as the binary ones, in a file of our own (the distribution's stays as is).
SRC_LIST=/etc/apt/sources.list.d/logstore-bench-deb-src.sources
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $SUDO tee "$SRC_LIST" >/dev/null
	else
		grep -h '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
			| $SUDO tee /etc/apt/sources.list.d/logstore-bench-deb-src.list >/dev/null
	fi
fi

NEED=""
for pkg in librdkafka-dev libjemalloc2 dpkg-dev build-essential; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || NEED="$NEED $pkg"
done
$SUDO apt-get update -qq >/dev/null
if [ -n "$NEED" ]; then
	echo "installing$NEED with apt-get"
	# shellcheck disable=SC2086 # one word per package
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $NEED >/dev/null
fi

mkdir -p "$OUT/src" "$LIBDIR"
SRC=$(ls -d "$OUT"/src/librdkafka-*/ 2>/dev/null | head -n 1 || true)
if [ -z "$SRC" ]; then
	(cd "$OUT/src" && apt-get source -qq librdkafka >"$OUT/source.log" 2>&1) || { cat "$OUT/source.log" >&2; exit 1; }
	SRC=$(ls -d "$OUT"/src/librdkafka-*/ | head -n 1)
fi
SRC=${SRC%/}

# The example includes the tree's private headers (rd.h, rdtime.h, ...) which include config.h.
if [ ! -f "$SRC/config.h" ]; then
	(cd "$SRC" && ./configure >"$OUT/configure.log" 2>&1) || {
		echo "librdkafka ./configure failed: see $OUT/configure.log" >&2
		exit 1
	}
fi

cc -O2 -g -o "$BIN.tmp" "$SRC/examples/rdkafka_performance.c" -I"$SRC" -I"$SRC/src" -lrdkafka -lpthread -lm
mv "$BIN.tmp" "$BIN"
ln -sf "$WHEEL_LIB" "$LIBDIR/librdkafka.so.1"
echo "built $BIN (runs against $WHEEL_LIB via LD_LIBRARY_PATH=$LIBDIR)"
