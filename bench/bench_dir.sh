#!/usr/bin/env bash
# bench_dir.sh - publish and follow a Hugging Face checkpoint directory of a
# full-size model (make bench-dir; default qwen2.5-7b: 15.2 GB of bf16 in
# four shards), and report for every step the wall time and the peak
# resident memory of `wsync publish DIR` and of `wsync pull DIR`, the memory
# as a ratio to the model's size. Every pulled version is checked tensor by
# tensor against the published one (a hash of each tensor's bytes, computed
# from the source before it is removed).
#
# usage: bench/bench_dir.sh WSYNC [--model M] [--shards K | --file] [--steps S]
#                           [--work DIR] [--threads T]
#   --file      one safetensors file, not a directory: `wsync publish FILE`
#               and `wsync pull FILE`; then a catch-up, `wsync pull` of the
#               file pulled at step 0 through deltas 1..S in one process
#               (make bench-pullmem: qwen3-0.6b, 10 steps)
#   --steps S   steps 0..S: an anchor, then S deltas (default 2)
#   --work DIR  where the source, the bucket and the follower's directory
#               live (default build/bench-dir; removed at the start and end)
#
# Disk: the source (one model), the bucket (one anchor and the deltas) and
# the follower's versions (two, three during a switch): about four models
# at the peak, so the source is removed after each publish (and regenerated,
# bit for bit, by `wsync gen --shards` for the next step).
set -u
bin=${1:?usage: bench_dir.sh WSYNC [--model M] [--shards K | --file] [--steps S] [--work DIR] [--threads T]}
shift
model=qwen2.5-7b shards=4 steps=2 work=build/bench-dir threads=2 file=0
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --file) file=1; shift ;;
    --steps) steps=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "bench_dir.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
py=/usr/bin/python3
[ -x $py ] || py=python3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work" || exit 1
src=$work/src bucket=$work/bucket dst=$work/model
trap 'rm -rf "$work"' EXIT
# where gen writes step S and what publish and pull take: the directory, or
# (--file) one file in it (the hash script reads every file of a directory)
gen_step() {
    if [ $file -eq 1 ]; then mkdir -p "$src" && "$bin" gen --model "$model" --step "$1" --threads "$threads" -o "$src/model.safetensors"
    else "$bin" gen --model "$model" --step "$1" --shards "$shards" --threads "$threads" -o "$src"; fi
}
src_arg=$src dst_arg=$dst
[ $file -eq 1 ] && { src_arg=$src/model.safetensors; dst_arg=$dst/model.safetensors; mkdir -p "$dst"; }

# The model's size from a step-0 directory's index (or its one shard).
gen_step 0 || exit 1
bytes=$($py -c 'import json,os,sys,glob
d=sys.argv[1]; i=os.path.join(d,"model.safetensors.index.json")
print(json.load(open(i))["metadata"]["total_size"] if os.path.exists(i) else os.path.getsize(glob.glob(d+"/*.safetensors")[0]))' "$src")
need=$((bytes * 4 / 1024 / 1024 / 1024 + 3))
free=$(df -P -k "$work" | awk 'NR==2 {print int($4 / 1024 / 1024)}')
if [ "$free" -lt "$need" ]; then
    echo "bench_dir.sh: needs about $need GB free beside $work, has $free GB" >&2
    exit 1
fi
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') (family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //'), model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | sed 's/.*: //')), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo) memory"
echo "# $(df -P -h "$work" | awk 'NR==2 {print $4}') free beside $work; $("$bin" --version 2>/dev/null | head -n 1)"
echo "# $model: $([ $file -eq 1 ] && echo "one file" || echo "$shards shards"), $bytes bytes of bf16 ($(awk -v b="$bytes" 'BEGIN {printf "%.2f GB", b / 1e9}'))"
printf '%-5s %-8s %9s %11s %9s %11s %11s %9s\n' step what wall_s peak_rss_mb "rss/model" anon_mb file_mb "anon/model"

measure() { # step, what, command...: wall time and peak RSS (/usr/bin/time), and
    # the peaks of its anonymous and file-backed resident memory (RssAnon and
    # RssFile of /proc/PID/status, sampled every 50 ms): mapped files' pages
    # count in RSS but are the kernel's page cache, which it can drop.
    local step=$1 what=$2 pid anon=0 file=0 a f; shift 2
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" >"$work/out" 2>"$work/err" & pid=$!
    while kill -0 $pid 2>/dev/null; do
        for q in $(cat /proc/$pid/task/*/children 2>/dev/null); do
            a=$(awk '/^RssAnon/ {print $2}' /proc/$q/status 2>/dev/null); f=$(awk '/^RssFile/ {print $2}' /proc/$q/status 2>/dev/null)
            [ -n "$a" ] && [ "$a" -gt $anon ] && anon=$a
            [ -n "$f" ] && [ "$f" -gt $file ] && file=$f
        done
        sleep 0.05
    done
    wait $pid || { echo "bench_dir.sh: step $step: $what failed:" >&2; tail -n 5 "$work/err" >&2; exit 1; }
    read -r wall kb <"$work/time"
    printf '%-5s %-8s %9s %11d %9s %11d %11d %9s\n' "$step" "$what" "$wall" $((kb / 1024)) \
        "$(awk -v k="$kb" -v b="$bytes" 'BEGIN {printf "%.4f", k * 1024 / b}')" $((anon / 1024)) $((file / 1024)) \
        "$(awk -v k="$anon" -v b="$bytes" 'BEGIN {printf "%.4f", k * 1024 / b}')"
}

for s in $(seq 0 "$steps"); do
    [ "$s" -eq 0 ] || gen_step "$s" || exit 1
    $py "$here/bench_dir_hash.py" "$src" >"$work/want.$s" || exit 1
    before=$(du -sb "$bucket" 2>/dev/null | cut -f1); before=${before:-0}
    measure "$s" publish "$bin" publish --store "$bucket" --step "$s" --threads "$threads" "$src_arg"
    after=$(du -sb "$bucket" | cut -f1)
    echo "      bucket: +$((after - before)) bytes ($(awk -v a=$((after - before)) -v b="$bytes" 'BEGIN {printf "%.4f", a / b}') of the model)"
    rm -rf "$src"
    measure "$s" pull "$bin" pull --store "$bucket" --threads "$threads" "$dst_arg"
    $py "$here/bench_dir_hash.py" "$dst" >"$work/got.$s" || exit 1
    if cmp -s "$work/want.$s" "$work/got.$s"; then echo "      pulled step $s: every tensor equal to the published one"
    else echo "bench_dir.sh: step $s: the pulled directory differs from the published one" >&2; exit 1; fi
    [ $file -eq 1 ] && [ "$s" -eq 0 ] && { mkdir -p "$work/catchup" && cp "$dst_arg" "$work/catchup/model.safetensors" || exit 1; }
done
# --file: the file pulled at step 0, brought to step S in one pull (S deltas)
if [ $file -eq 1 ] && [ "$steps" -ge 1 ]; then
    measure "0-$steps" catchup "$bin" pull --store "$bucket" --threads "$threads" "$work/catchup/model.safetensors"
    echo "      $(cat "$work/out")"
    $py "$here/bench_dir_hash.py" "$work/catchup" >"$work/got.catchup" || exit 1
    if cmp -s "$work/want.$steps" "$work/got.catchup"; then echo "      caught up to step $steps: every tensor equal to the published one"
    else echo "bench_dir.sh: the catch-up from step 0 differs from step $steps" >&2; exit 1; fi
fi
