# lib_dir_store.sh - sourced by tests/http/test_http.sh and tests/http/test_s3.sh: a
# Hugging Face checkpoint directory (wsync gen --shards) published to a
# remote store and pulled and followed back into directories, every tensor
# compared (bench/bench_dir_hash.py). Uses the caller's pass and fail.

dir_over_store() { # tool, store URL, scratch dir, label
    local tool=$1 url=$2 w=$3 what=$4 s py=/usr/bin/python3 hash
    hash="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../bench" && pwd)/bench_dir_hash.py"
    [ -x $py ] || py=python3
    mkdir -p "$w"
    for s in 0 1 2 3 4; do
        if ! "$tool" gen --model tiny --step $s --shards 3 -o "$w/src$s" >"$w/out" 2>&1 ||
            ! "$py" "$hash" "$w/src$s" >"$w/want$s"; then
            fail "$what: directory step $s: $(head -c 300 "$w/out")"
            return
        fi
    done
    for s in 0 1 2 3 4; do
        if "$tool" publish --store "$url" --step $s --anchor-every 3 "$w/src$s" >"$w/out" 2>&1; then
            pass "$what: publish the directory as step $s"
        else fail "$what: publish the directory as step $s: $(head -c 300 "$w/out")"; fi
    done
    if "$tool" log --store "$url" >"$w/out" 2>&1 && grep -q "anchors/step_000003/ (a directory" "$w/out" && grep -q "model-00002-of-00003.safetensors (33 tensors)" "$w/out"
    then pass "$what: log lists the step 3 anchor's shards"
    else fail "$what: log: $(head -c 300 "$w/out")"; fi
    dir_pulled() { # name, dir, step
        if "$py" "$hash" "$2" 2>&1 | cmp -s - "$w/want$3"; then pass "$what: $1: every tensor, the index and config.json are step $3's"
        else fail "$what: $1: not step $3: $(diff <("$py" "$hash" "$2" 2>&1) "$w/want$3" | head -n 3)"; fi
    }
    if "$tool" pull --store "$url" "$w/head" >"$w/out" 2>&1; then pass "$what: pull into a new directory"
    else fail "$what: pull into a new directory: $(head -c 300 "$w/out")"; fi
    dir_pulled "the pulled directory" "$w/head" 4
    if "$tool" pull --store "$url" --step 2 "$w/mid" >"$w/out" 2>&1; then pass "$what: pull --step 2 into a directory"
    else fail "$what: pull --step 2: $(head -c 300 "$w/out")"; fi
    dir_pulled "pull --step 2" "$w/mid" 2
    if timeout 60 "$tool" follow --store "$url" --interval 0.1 --until-step 4 "$w/mid" >"$w/out" 2>&1
    then pass "$what: follow a directory from step 2 to step 4"
    else fail "$what: follow from step 2: $(head -c 300 "$w/out")"; fi
    dir_pulled "the followed directory" "$w/mid" 4
}
