#!/bin/sh
# Builds SQLite with SQLITE_DEBUG (its internal assertions on) from Debian's
# source package of the installed SQLite, as DIR/libsqlite3.so.0. Tests load
# it in place of the system library (LD_LIBRARY_PATH) to check how the
# extension calls SQLite: misuse the release build lets pass (a schema object
# used after SQLite freed it) fails an assertion there at once.
#
#   sh tests/sqlite_debug.sh DIR
#
# The source index comes through a private apt configuration under DIR: the
# system's apt sources are not changed. Needs dpkg-dev (apt-get source) and
# tcl (SQLite's build makes its amalgamation with tclsh). When the source
# cannot be had (no network), says so and exits 0: the tests that need the
# library are then skipped, naming this script.
set -u
dir=$1
lib=$dir/libsqlite3.so.0
[ -f "$lib" ] && exit 0
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/apt/parts" "$dir/src"
dir=$(cd "$dir" && pwd)
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
cat > "$dir/apt/sources.list" <<LIST
deb-src http://deb.debian.org/debian $codename main
deb-src http://deb.debian.org/debian $codename-updates main
deb-src http://deb.debian.org/debian-security $codename-security main
LIST
apt="-o Dir::Etc::SourceList=$dir/apt/sources.list -o Dir::Etc::SourceParts=$dir/apt/parts
     -o Dir::State::Lists=$dir/apt/lists -o Dir::Cache=$dir/apt/cache -o APT::Sandbox::User=root -q"
log=$dir/build.log
echo "sqlite-debug: building SQLite with SQLITE_DEBUG from Debian's source package (log: $log)"
if ! { apt-get $apt update &&
       (cd "$dir/src" && apt-get $apt source sqlite3) ; } > "$log" 2>&1; then
  echo "sqlite-debug: cannot get Debian's source of sqlite3 (see $log): the tests under SQLITE_DEBUG will be skipped"
  exit 0
fi
src=$(ls -d "$dir"/src/sqlite3-*/ | head -n 1)
mkdir -p "$dir/build"
if ! { (cd "$dir/build" && "$src/configure" --quiet && make sqlite3.c) &&
       cc -shared -fPIC -O1 -g -DSQLITE_DEBUG -DSQLITE_ENABLE_COLUMN_METADATA \
          -DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_MATH_FUNCTIONS -DSQLITE_THREADSAFE=1 \
          -Wl,-soname,libsqlite3.so.0 -o "$lib.tmp" "$dir/build/sqlite3.c" \
          -lm -ldl -lpthread && mv "$lib.tmp" "$lib"; } >> "$log" 2>&1; then
  echo "sqlite-debug: the build failed (see $log): the tests under SQLITE_DEBUG will be skipped"
  exit 0
fi
echo "sqlite-debug: $lib"
