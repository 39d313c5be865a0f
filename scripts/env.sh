# Sourced by the scripts: where the Python venv lives and how ccache is set up so that a fresh
# clone in another folder still hits the cache (paths relative to the clone, PCH-safe).
FRUGAL_VENV="${FRUGAL_VENV:-$HOME/.cache/frugal/venv}"
FRUGAL_PYTHON_BIN="$FRUGAL_VENV/bin/python"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR=true
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
frugal_configure() {
  cmake --preset default -DFRUGAL_PYTHON="$FRUGAL_PYTHON_BIN" "$@" > build-configure.log 2>&1 \
    || { cat build-configure.log; return 1; }
  rm -f build-configure.log
}
