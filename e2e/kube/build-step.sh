# shellcheck shell=bash
# Sourced by tools/build.sh and operators/build.sh: `step MODULE WHAT -- command...` runs one build step with
# its output appended to $log; a failure is one line naming $built (what the script builds), the module and
# the step, and exits 1.
# shellcheck disable=SC2154  # $log and $built are the sourcing script's
step() {
    local module="$1" what="$2"; shift 3
    local t0; t0=$(date +%s)
    if ! "$@" >>"$log" 2>&1; then
        echo "error: build of $built failed: $module: $what (go's output: $log)" >&2
        exit 1
    fi
    echo "built: $what ($module) in $(( $(date +%s) - t0 ))s" >&2
}
