# Sourced by the scripts that measure gradsync's collectives against a library run directly
# (bench-shm-vs-mpi.sh, bench-backends-vs-libraries.sh): the checks they share, mpirun's root
# flag, a scratch folder, and `table`, which runs one bench and keeps its table apart from what
# it says on stderr.
#   need_tools TOOL...      each must be an executable (else one line and exit 2); mpirun too
#   machine                 prints "AMD EPYC 9R14, 2 cores": the CPU the figures are of
#   table COMMAND...        runs it: its stdout in $out/table, its stderr in $out/said; on
#                           failure prints both and ends the script with one line naming it

need_tools() {
  local tool
  for tool in "$@"; do
    [[ -x $tool ]] || { echo "error: $tool is not built (make, or cmake --build build)" >&2; exit 2; }
  done
  command -v mpirun >/dev/null || { echo "error: mpirun not found: install Debian's openmpi-bin" >&2; exit 2; }
}

machine() { echo "$(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"; }

root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The table alone goes to the parsers: a line on stderr (a refused stray connection, an MPI
# notice) written while a row is printed would otherwise split that row and lose its size.
table() {
  if ! "$@" >"$out/table" 2>"$out/said"; then
    cat "$out/table" "$out/said" >&2
    echo "error: failed: $*" >&2
    exit 1
  fi
}
