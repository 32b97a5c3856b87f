/* wsync.h v0.2.0 - keep inference weights in step with an RL trainer, bit-exact - MIT license */
/*
OVERVIEW
========
wsync moves model weights from a trainer to inference engines after every
optimizer step. This header is the core, libc only (POSIX threads and files
where available): dtypes and numeric conversions (f32 <-> bf16/f16/fp8), a
strict safetensors reader and a streaming writer, a 64-bit digest,
SHA-256, SHA-512, BLAKE2b and Ed25519 (for signed chains), a SIMD bitwise
diff, sparse deltas in four encodings (wsync_delta_encode,
wsync_delta_apply), the object-store interface with a directory store and
a memory store, and the delta chain over a store (wsync_publish on the
trainer side, wsync_subscriber_sync on the inference side), and the
fabric interface for one-sided writes (wsync_fabric). Optional companions:
wsync_http.h (libcurl: stores over HTTP servers such as nginx with WebDAV,
and over S3) and wsync_rdma.h (fabric backends: TCP, one host).

It is a single header in the stb style: declarations always, the code only
in the one C or C++ file that defines WSYNC_IMPLEMENTATION first:

    #define WSYNC_IMPLEMENTATION
    #include "wsync.h"

and link with -pthread (cc -std=c99 app.c -pthread) unless it is built with
WSYNC_NO_THREADS. The header is two libraries in one: the codec (dtypes to
deltas) and the runtime over it (stores, the chain, the prefetch, the
mirror); WSYNC_NO_CHAIN builds the codec alone and WSYNC_NO_ENCODE leaves
out the encoders (see COMPILE-TIME OPTIONS).

QUICK START
===========
Open a safetensors file and list its tensors (zero-copy: every tensor's
`data` points into the mapping):

    wsync_mapped map;
    wsync_st_file st;
    wsync_error err;
    if (wsync_file_map("model.safetensors", &map, &err) != WSYNC_OK ||
        wsync_st_parse(map.bytes, map.size, NULL, &st, &err) != WSYNC_OK) {
        fprintf(stderr, "%s\n", err.message);   // names tensor, offset, rule
        ...
    }
    for (size_t i = 0; i < st.n_tensors; i++)
        printf("%s %s\n", st.tensors[i].name, wsync_dtype_name(st.tensors[i].dtype));
    wsync_st_free(&st);
    wsync_file_unmap(&map);

Write one (the header is padded with spaces to a multiple of 8, data offsets
are contiguous in the order given):

    uint64_t shape[2] = {2, 3};
    wsync_st_tensor_desc t = {"w", WSYNC_DTYPE_BF16, 2, shape, bits, 12};
    wsync_st_write(&t, 1, NULL, 0, my_sink, my_file, NULL, &err);

Convert: wsync_f32_to_bf16() rounds to nearest even exactly as PyTorch's
`tensor.to(torch.bfloat16)` does, subnormals included.

Deltas: describe tensors as wsync_tensor {name, dtype, rank, shape, data,
nbytes}, each in one call with wsync_tensor_dense(&t, name, dtype, rank,
shape, data, &err) (nbytes computed, overflow checked);
wsync_delta_encode(base, next, n, &opt, sink, user, &stats, &err)
writes a delta file; wsync_delta_apply(bytes, size, weights, n, NULL,
&stats, &err) checks all of it (digests included) and only then patches
the weights in place.

The chain: a trainer calls wsync_publish(pub, step, tensors, n, ...) after
each step (a delta or an anchor, then HEAD, into a wsync_store); an engine
calls wsync_subscriber_sync(sub, WSYNC_STEP_LATEST, ...) between batches and
its weights move from one published step to another, never to anything else.

CONTENTS
========
Every section's code carries a tag: search for it and the first hit is
its declarations, the second its implementation. A tag marked * has code
only in the implementation (one hit). tests/core/test_toc.sh checks this list.
The codec comes first (>>platform to >>delta-apply), the runtime after it
(>>store to >>fabric), which WSYNC_NO_CHAIN leaves out (COMPILE-TIME
OPTIONS).

    >>platform    * inlining, SIMD detection and target attributes, bit helpers
    >>errors        results, wsync_error, wsync_result_str/_name
    >>alloc         allocators, wsync_pool, overflow-checked sizes
    >>workers     * running work over tensors on worker threads
    >>dtypes        dtypes, their names and sizes
    >>convert       f32 <-> bf16, f16, fp8
    >>files         wsync_file_map
    >>crypto        SHA-256, SHA-512, BLAKE2b, Ed25519 (signed chains)
    >>st-read       safetensors reader
    >>json          the JSON tokenizer every JSON reader here uses (the
                    safetensors header, HEAD); its strings and numbers, public
    >>st-write      safetensors writer (streaming and whole)
    >>digest        wsync64 (wsync_digest) and the SIMD diff
    >>delta         deltas: wsync_delta_encode, _apply, _info; shared pieces
    >>ordered     * ordered integers and zigzag steps
    >>bits        * the LSB-first bit writer and reader, Rice parameters
    >>packed-enc  * packed (coder 1): the Rice block encoder
    >>packed-dec  * packed (coder 1): the Rice block decoder
    >>rc          * packed-max: the range coder's primitives
    >>classes     * packed-max: classes, ranks, the position walk
    >>rc-enc      * packed-max (coder 2): the range-coded block encoder
    >>rc-dec      * packed-max (coder 2): the symbol reader
    >>crice-enc   * packed-max (coder 3): the class-Rice block encoder
    >>crice-dec   * packed-max (coder 3): the class-Rice block reader
    >>stream-enc  * packed and packed-max: diff, blocks, a tensor's stream
    >>stream-dec  * packed and packed-max: a stream's header and block table
    >>trl-enc     * trl-v1 and trl-v3: the encoder's pieces
    >>trl-dec     * trl-v1 and trl-v3: the reader and writer
    >>delta-encode * wsync_delta_encode: threads, __metadata__, output
    >>delta-read  * reading a delta: which encoding, its steps, wsync_delta_info
    >>delta-apply * wsync_delta_apply's phases: decode, digests, write
    >>store         the store interface, get_all, get_capped
    >>store-mem   * the memory store
    >>store-dir   * the directory store
    >>chain         the chain: options, entries, wsync_chain_read
    >>chain-head    HEAD: wsync_chain_head_format and _parse
    >>chain-read  * reading a chain: HEAD, or a listing without one
    >>state-digest * wsync_state_digest
    >>publisher     the publisher: open, publish, retention
    >>subscriber    the subscriber: open, sync, apply_ready
    >>sub-plan    * the subscriber's path planning (cheapest in bytes)
    >>prefetch      the background prefetch and its status
    >>mirror        the mirror subscriber: changes recorded, merged, handed to an engine
    >>engine-map    the mirror's changes into an engine's fused and sharded parameters
    >>dir           model directories: read, publish, follow (versions beside a link)
    >>fabric        the fabric interface and its descriptors

Private names are wsync__; the short sub-prefixes mean (one meaning each):
    wsync__bw_  wsync__br_   bit writer, bit reader (LSB first)
    wsync__rice_  wsync__rs_ Rice blocks (coder 1); rs_: one being decoded
    wsync__rce_  wsync__rcd_ range coder: encoder, decoder (coder 2)
    wsync__cr_  wsync__crice_ class-Rice (coder 3): its reader and raw width;
                             its block encoder
    wsync__pm_  wsync__pmx_  packed-max: shared pieces; the decoder's scratch
    wsync__pm_rank_          packed-max: the rank bits (a change's index among
                             its class's elements): built, read as a window
    wsync__cls_              packed-max: the class rule (top, k, shift)
    wsync__cmask_            packed-max: the mask of one class in 64 class bytes
    wsync__trl_              trl-v1 and trl-v3 (trl3_: trl-v3 only)
    wsync__list_             packed-max: a tensor's decoded changes
    wsync__rep_              apply's report: the chunks of changes handed to
                             wsync_delta_options.on_changes
    wsync__d*_               wsync64 pieces (dstripe_, drounds_, dscramble_,
                             dhalf_, dprefetch_)
    wsync__rne_              conversions: a shift rounding to nearest even
    wsync__pool_             the allocator wsync_pool, and only it
    wsync__workers_          the worker dispatcher (wsync__workers_do)
    wsync__buf_              a growable byte buffer
    wsync__js_               the JSON tokenizer (strings, numbers, skipping)
    wsync__jp_               HEAD's JSON reader (over wsync__js_)
    wsync__emit_             the safetensors writer's header output
    wsync__dir_  wsync__mem_ the directory store, the memory store
    wsync__sub_  wsync__pub_ subscriber, publisher
    wsync__pre_  wsync__bg_  prefetched objects, the prefetch thread
    wsync__poll_             the prefetch thread's steps (one poll)
    wsync__astream_          an anchor streamed from the store (digest, spool
                             file or straight into the targets)
    wsync__fe_  wsync__ge_   Ed25519: field elements mod 2^255 - 19, curve
    wsync__sc_  wsync__ed_   points, scalars mod L; keys and signatures
                             (wsync__edc: the curve's constants)
    wsync__b2b_              BLAKE2b
    wsync__stp_              the safetensors reader (wsync__stp_parser: its
                             two passes over the header)
    wsync__mrec_             the mirror subscriber: one tensor's changes
                             since the engine's last take
    wsync__mdir_             model directories (wsync_dir_*; wsync__dir_ is
                             the directory store)
Other private names are plain words (wsync__apply_write, wsync__cmp_names).
*/
/*
FORMATS
=======
The reference for every byte wsync writes and reads: deltas in four
encodings, anchors, HEAD, and where the chain keeps them in a store. All
integers are little-endian; element values are the tensors' raw bits, as
safetensors stores them. CONTENTS (after QUICK START) names where
the code for each piece is.

Containers
----------
Deltas and anchors are safetensors files, written by wsync_st_writer: an
8-byte header length N, N bytes of JSON padded with spaces so that the
data start at a multiple of 8, then the tensors' bytes, contiguous in the
order the tensors are listed. The header lists "__metadata__" first (a
string-to-string map), then the tensors in the order given. A reader takes
what wsync_st_parse accepts (section "Safetensors: reader").

wsync64 (wsync_digest) is XXH3's accumulator shape in a form every SIMD
path computes exactly: eight 64-bit lanes over 64-byte stripes (each lane
adds lo32(d ^ key) * hi32(d ^ key) and adds the raw word d to its
neighbour lane), a scramble every 1 KiB, and a final mix with the length;
the keys and the portable code in the "Delta: digest and diff" section
are its definition (wsync__dstripe_scalar, wsync__dfinish). Every digest
in the formats below is wsync64 of the bytes named.

Ordered integers and steps
--------------------------
A changed element is coded as the step from its base value in an integer
order that sorts sign-magnitude floats by value. For a b-bit pattern u with
sign bit s = 1 << (b-1) and mask m = 2s - 1 (all ones for b = 64):

    ord(u) = u & s ? ~u & m : u | s

Adjacent representable values differ by 1 (-0 and +0 are neighbours). It is
a bijection on all bit patterns, so NaN payloads and integer dtypes pass
through. The step d = ord(new) - ord(base) modulo 2^b is never 0 and is
stored as

    z = d > 0 ? 2(d - 1) : -2d - 1      (+1, -1, +2, -2 -> 0, 1, 2, 3)

with d read as a signed b-bit number; the decoder's new value is
unord(ord(base) + unzz(z)) modulo 2^b.

Delta: which encoding
---------------------
A reader (wsync__detect) decides from __metadata__ "format":
"wsync-delta" needs "version" "1" and "encoding" "packed" or "packed-max"
(anything else: WSYNC_ERR_UNSUPPORTED); another format but
"sparse_weight_patch" is refused. For "sparse_weight_patch" or no format
the tensor names decide: any name ending in ".idx" is trl-v3, else any
ending in ".indices" trl-v1; with neither, "encoding" "gap_delta" means
trl-v3 and anything else trl-v1 (no format and no such names: not a
delta). Steps: packed* read "base_step" and "step", trl*
"prev_model_version" and "model_version", as decimal digits; without a
base (or with -1, as TRL may write) the base is only assumed to be
step - 1 (wsync_delta_stats.has_base 0).

Delta: packed and packed-max
----------------------------
__metadata__, in this order: "format" "wsync-delta", "version" "1",
"encoding" "packed" or "packed-max", "base_step", "step",
"changed_elements", "total_elements" (decimal). One entry per dense tensor
given to the encoder, changed or not, in the order given: the dense
tensor's name, dtype U8, shape [stream bytes], holding one stream:

    offset   size  field
    0        4     magic "WSD1"
    4        1     coder: 1 Rice (packed); packed-max: 3 class-Rice
                   (written by default), 2 range coder (written with
                   WSYNC_DELTA_RANGE_CODER, for readers before coder 3)
    5        1     dense dtype as its wsync_dtype number: BOOL 1, U8 2, I8 3,
                   F8_E4M3 4, F8_E5M2 5, F8_E8M0 6, I16 7, U16 8, F16 9,
                   BF16 10, I32 11, U32 12, F32 13, F64 14, I64 15, U64 16,
                   C64 17 (1, 2, 4 and 8-byte elements only)
    6        1     rank r
    7        1     log2 of elements per block, 6..20
                   (WSYNC_DELTA_MAX_BLOCK_LOG2); written: 16 for packed,
                   18 for packed-max, unless wsync_delta_options.block_log2
    8        8r    shape
    8+8r     8     changed elements C
    16+8r    8     wsync64 of the base tensor's bytes
    24+8r    8     wsync64 of the result tensor's bytes
    32+8r    8     coders 2 and 3 only, the class rule: u16 top, u8 k,
                   u8 shift, 4 zero bytes
    then     4B    when C > 0: u32 byte size of each of the
                   B = ceil(elements / block) blocks
    then           the blocks' bytes, in order; a block without changes
                   has size 0 and no bytes

A stream with C = 0 ends after the digests (and the class rule). Blocks
are independent: each decodes on its own. The reader refuses a stream
whose dtype, rank or shape differs from its target's, a block log2 outside
6..20, C above the element count or with C / 4 above the stream's size
(C / 64 for coder 2), block sizes that do not add up to exactly the bytes after the table, a
block whose changes do not sum to C, and, before it writes anything, base
and result digests that do not match (unless WSYNC_DELTA_SKIP_*). Applying
a stream with changes needs fewer than 2^32 elements in the tensor.

Class rule (coders 2 and 3). Every element of a block gets a class from
its base value's exponent field e:

    class = e is all ones ? 0 : min(max(top - e, 0) >> shift, k - 1)

for BF16, F16, F32, F64, F8_E4M3 and F8_E5M2; every element of any other
dtype (integers, BOOL, F8_E8M0) is in class 0. A reader requires, for
coder 2, k = 12 and shift = 0; for coder 3, 1 <= k <= 12 and shift <= 3;
for both, top no larger than the dtype's all-ones exponent (0 for dtypes
without one) and the four zero bytes. wsync writes, with E the largest
exponent field in the tensor below all ones: coder 2 top = E, k = 12,
shift 0; coder 3 top = max(E - 3, 0), k = 7, shift 1 (classes of two
binades). A change's rank is its index among the block's elements of its
class, in position order; its rank gap is its rank minus (the previous
change's rank in that class + 1), or its rank for the class's first.

Bit streams (coders 1 and 3) are read least significant bit first, byte
by byte, and end padded with zero bits to a whole byte exactly at the
block's end (a reader refuses nonzero padding and bytes left over).

  Rice code with k of v: q = v >> k one-bits, a zero bit, the low k bits
  of v (low bit first).
  Gap code with k: a Rice code, except where q >= 32: 32 one-bits (no
  zero) and the gap in 32 raw bits.

Rice block (coder 1): a LEB128 count n (1 <= n <= block length, at most
10 bytes), one byte kg (0..24), one byte kv (0..31), then the bit stream.
For each change in position order: the gap (elements skipped since the
previous change, or since the block's start) as a gap code with kg; then
the value: z as a Rice code with kv, except where z >> kv >= 16: 16
one-bits (no zero) and the NEW VALUE's raw bits (8, 16, 32 or 64; 64 as
two 32-bit halves, low first), not z. A position past the block is
refused; a z too large for the element wraps modulo 2^b and is caught by
the result digest. Any kg and kv decode; wsync's encoder takes kg for a
geometric source with the block's mean gap and kv the cheapest over up to
64 of the block's values.

Class-Rice block (coder 3): one bit stream. A count is 5 bits L (the
count's bit length, 0 for zero) and then, for L > 1, the L - 1 bits under
its leading one. For each class 0 .. k-1 in turn: its number of changes n
as a count; where n > 0: 5 bits kg (0..24), the n rank gaps as gap codes
with kg, then the values. A value is mostly z = 0 or 1; the others
(z >= 2) are escaped. Their number ne (<= n) comes as a count; where
ne = 0, n one-bit values z follow. Where ne > 0: 5 bits ke (0..24), 5
bits km (0..31), and the class index (0..n-1) of the first escaped change
as a gap code with ke; then for each of the class's n changes in rank
order: one bit z if it is not escaped; if it is, z - 2 as a Rice code
with km, except where the quotient reaches 16: 16 one-bits and z - 2 in
8w + 1 raw bits (w the element bytes; 64 for 8-byte elements, low 32
first), followed, unless it was the class's last escaped change, by the
gap to the next escaped index (index - this index - 1) as a gap code
with ke. A reader refuses a count past the block or past the changes
left, kg or ke above 24, a rank past its class, an escaped index past
its class, z - 2 above 2^64 - 3, a block with no changes at all, bytes
left after the last class and nonzero padding.

Range-coded block (coder 2): one LZMA-style binary range coder stream
(probabilities of 11 bits starting at 1/2, adaptation shift 5; the
encoder starts with low 0, range 2^32 - 1, flushes 5 bytes, so its first
byte is 0, which a reader requires; the decoder reads 5 bytes first).
All probabilities restart at every block. For class 0 to 11 in turn: the
class's number of changes, then for each change its rank gap and its
value. An unsigned integer v is coded as its bit length L (0 for v = 0)
through a binary tree of depth 5 (counts and gaps) or 7 (values),
most significant bit of L first, one probability per tree node, class
and kind (count, gap, value); where L >= 2 the bit under the leading one
(one probability per class, kind and L), where L >= 3 the next bit (two
probabilities per class, kind and L, chosen by the bit before), and the
remaining L - 3 bits direct (probability 1/2, most significant first). A
value is one decision "z >= 2" (a probability per class); if not, one
more decision is z (0 or 1; a probability per class); if so, z as an
integer. The stream must end exactly at the block's end (bytes left:
WSYNC_ERR_TRAILING_BYTES); a length above 64, a coded z below 2, a rank
past its class, a class count past the block or the changes left and a
block without changes are refused.

Delta: trl-v1 and trl-v3 (TRL's delta weight sync)
--------------------------------------------------
__metadata__, in this order: "format" "sparse_weight_patch", "version"
"1", "sparse" "True", "model_version" (the step), "prev_model_version" (the
base step), "num_changed_params" (tensors with changes),
"total_changed_elements", "total_elements", "sparsity" (the unchanged
fraction, printf "%.10g"); trl-v3 adds "encoding" "gap_delta". For each
tensor with changes, in the order given (a tensor without changes has no
entry):

  trl-v1  "{name}.indices" I32 [n], flat indices strictly ascending, then
          "{name}.values" [n] in the tensor's dtype: the new values.
  trl-v3  "{name}.idx" [n] gaps: idx[k] - idx[k-1] - 1, the first the
          index itself; U16, or U32 for a tensor where a gap exceeds
          65535; then "{name}.val" [n] as above.

The encoder needs fewer than 2^31 elements per tensor. The reader also
takes I64 indices (trl-v1) and requires each values tensor to have its
indices, both 1-D of one length, values in the target's dtype, every
index inside the tensor, and no other entries. These carry no digests or
shapes: a wrong base cannot be detected.

Anchors
-------
A plain safetensors file of the published image: the tensors in the
order given to wsync_publish, their dtypes as published (F32 cast to BF16
unless WSYNC_CHAIN_KEEP_F32), __metadata__ "format" "pt", "wsync"
"anchor", "step" (at least 6 digits, zero-padded: "000040"). A subscriber
requires every target's name, dtype and shape in it, and, where "step" is
present, its decimal value to be the anchor's step.

A directory's anchor (a publisher given wsync_publisher_set_layout: a
Hugging Face checkpoint of shards, an index, config files) is several
objects instead: each shard a safetensors file as above holding the next
run of the published tensors, in order, then each plain file byte for byte
(config.json, model.safetensors.index.json, ...). Together the shards hold
every tensor once; a subscriber finds each target in the shard that holds
it by name (its dtype and shape as above), and a target in no shard, or in
two, fails the anchor.

The chain in a store
--------------------
Under an optional prefix ("<prefix>/"; a valid key itself, under 512
bytes):

    anchors/step_NNNNNN.safetensors   an anchor, NNNNNN the step, "%06llu"
    anchors/step_NNNNNN/NAME          a directory's anchor: one object per
                                      shard and file, NAME as HEAD lists it
    deltas/step_NNNNNN.safetensors    the delta from its base to step NNNNNN
    HEAD                              the chain's pointer, written last

Steps are at most WSYNC_STEP_MAX (10^15 - 1). With HEAD, objects are
named by HEAD alone (their keys made from the steps as above). Without
HEAD (a bucket written by TRL), the chain is a listing of anchors/ and
deltas/: keys directly under them named "step_" + 1 to 15 decimal digits
+ ".safetensors" (zero-padded or not: "step_7" and "step_000007" are both
step 7, and each object is fetched by the key it was listed under; leading
zeros count toward the 15, so no step is above WSYNC_STEP_MAX; no sign,
space or other character; any other key is ignored). One step of one kind
under two keys is refused (WSYNC_ERR_BAD_HEAD, naming both keys): which
object is that step is not known. Each delta's base is taken to be the
previous step listed (anchor or delta; step - 1 for the first), and a
delta that carries its own base is held to it.

HEAD
----
JSON, as wsync_chain_head_format writes it (newlines exactly so):

    {"format":"wsync-chain","version":1,"step":S,"anchor":A,"state":"H","encoding":"E",
    "anchors":[
    {"step":40,"bytes":N,"digest":"H","state":"H"},
    {"step":60,"bytes":N,"digest":"H","state":"H","files":[
     {"name":"model-00001-of-00002.safetensors","bytes":N,"digest":"H","tensors":K},
     ...
     {"name":"config.json","bytes":N,"digest":"H"}]},
    ...],
    "deltas":[
    {"step":41,"base":40,"bytes":N,"digest":"H","state":"H","encoding":"E"},
    ...],
    "check":"H"}

followed by one newline. Integers are unsigned decimal without leading
zeros; H is 16 lowercase hex digits of a 64-bit value.

    format    "wsync-chain"                    required
    version   1, or 2 when an anchor has "files"          required
    step      the newest step (HEAD's)         required
    anchor    the newest anchor's step         required
    state     state digest of the model at step       required
    encoding  the encoding name the publisher that wrote HEAD writes its
              deltas in; optional, unknown names read as 0. Not
              necessarily every delta's: see each delta's "encoding"
    anchors   [{step, bytes, digest, state}], ascending by step; required
    deltas    [{step, base, bytes, digest, state, encoding}], ascending;
              required
    check     wsync64 of every byte of HEAD before the '"' that opens the
              key "check"; required, and the last key

In an entry: bytes is the object's size, digest wsync64 of its bytes,
state the state digest of the model at its step; base (deltas only, an
anchor must not have one) the step it applies to, below its step;
encoding (deltas only, optional; in an anchor it is an unknown key) the
delta's encoding name, read by the same rules as the top-level one (a
plain string under 16 characters, unknown names read as 0, twice in one
entry refused). A chain continued by a publisher with another encoding
holds deltas of both, each entry naming its own. HEADs written before
entries carried it (0.2.0 and earlier) have none: such a delta's
encoding is not recorded (wsync_chain_entry.encoding 0), not assumed to
be the top-level one; the delta's __metadata__ always names it. The
version stays 1: a reader of version 1 skips the key as unknown and
reads everything else as before. The
state digest of a model (wsync_state_digest) is wsync64 over the 8-byte
little-endian wsync64 digests of its tensors' bytes, tensors sorted by
name in byte order (strcmp).

An anchor's "files" (version 2 only: a reader of version 1 would look for
one object, and must refuse the HEAD) makes it a directory's: its objects
are anchors/step_NNNNNN/ + name, in the order listed: shards first (each
with "tensors", how many tensors it holds, at least 1, the next ones in the
publish order), then plain files (no "tensors"). A name is 1 to 127 bytes
of [A-Za-z0-9._-], not starting with '.' (so never a path, never "..");
names are unique in the anchor; at most WSYNC_CHAIN_FILES_MAX (4096)
files, none of them empty of keys: name, bytes and digest are required.
The entry's bytes is the sum of its files' bytes, and its digest is
wsync64 of the files' digests, 8 bytes little-endian each, in order (a
check of the list itself; each object is checked against its own).
A HEAD without directory anchors is written as version 1, exactly as
before, so readers of 0.2.0 read every chain that has none.

A signed HEAD (written by a publisher given wsync_chain_options.sign_key)
adds four keys: "id" and "signer" after the top-level "encoding" (after
"state" without one), "blake2b" last in every entry (in a directory's
anchor in each file instead, after "tensors", and not in the entry), and
"sig" just before "check":

    {"format":"wsync-chain","version":1,"step":S,"anchor":A,"state":"H","encoding":"E","id":"I","signer":"K",
    "anchors":[
    {"step":40,"bytes":N,"digest":"H","state":"H","blake2b":"B"},
    ...],
    "deltas":[
    {"step":41,"base":40,"bytes":N,"digest":"H","state":"H","encoding":"E","blake2b":"B"},
    ...],
    "sig":"G",
    "check":"H"}

    id       the chain's identity: 16 bytes as 32 lowercase hex digits,
             random, chosen when a chain starts and kept by every publisher
             that continues it
    signer   the Ed25519 public key (RFC 8032) that signed it, 64 lowercase
             hex digits
    blake2b  BLAKE2b-256 (RFC 7693: unkeyed, 32 bytes out; b2sum -l 256) of
             the object's (the file's) bytes, 64 lowercase hex digits
    sig      the Ed25519 signature, 128 lowercase hex digits, of every byte
             of HEAD before the '"' that opens the key "sig"; only "check"
             follows it

"check" still covers every byte before it, "sig" included. A reader
refuses (WSYNC_ERR_BAD_HEAD) a HEAD with "sig" but not "signer" and "id",
or "signer" without "sig", a key other than "check" after "sig", and a
signed HEAD where an entry (a directory anchor's file) lacks "blake2b".
The version is not raised: a reader without a verify key (0.2.0's
included) skips the new keys as unknown and reads the chain as before,
unverified; a reader with one requires them and checks the signature
against its key (see "Signed chains" in the chain section).

wsync_chain_head_parse is strict: whitespace is space, tab, CR or LF;
known keys' strings are plain printable ASCII without escapes; a
duplicate key is refused; unknown keys (at the top or in an entry) are
skipped as any valid JSON value, nested up to 16 deep; nothing may follow
the object but whitespace. Then: at least one anchor and at most
1,000,000 entries, steps strictly ascending in each array and at most
WSYNC_STEP_MAX, "step" the largest step of any entry, "anchor" the
largest anchor step, and "check" matching. A reader fetches HEAD up to
WSYNC_CHAIN_HEAD_MAX_SIZE bytes.

COMPILE-TIME OPTIONS
====================
    WSYNC_IMPLEMENTATION   emit the implementation in this translation unit
    WSYNC_STATIC           give every public function static linkage
    WSYNC_DEF              override the linkage prefix yourself
    WSYNC_MALLOC/WSYNC_FREE replace the default allocator (define both or none)
    WSYNC_ASSERT(x)        assertion for programmer errors (never for input)
    WSYNC_NO_MMAP          wsync_file_map reads the file instead of mmap-ing it
    WSYNC_NO_THREADS       no POSIX threads (options.threads is then ignored);
                           otherwise link with -pthread
    WSYNC_NO_SIMD          portable C only (no SSE2/AVX2/AVX-512/NEON paths)
    WSYNC_NO_CHAIN         the codec alone: leaves out the runtime (stores,
                           the chain and HEAD, publisher, subscriber, prefetch,
                           mirror) and the fabric interface, whose only user
                           is wsync_rdma.h; what stays: base, dtypes,
                           conversions, files, hashes and signatures (key
                           files too), safetensors, wsync64 and the diff,
                           deltas (apply, info, encode). wsync_http.h and
                           wsync_rdma.h need the runtime and stop with #error
    WSYNC_NO_ENCODE        leaves out the delta encoders (wsync_delta_encode
                           and what only it uses) and the publisher, which
                           encodes; the subscriber, the mirror and every
                           reader stay (an engine that only applies)

    Define the options before every #include of wsync.h in a program (they
    change the declarations too). Both together leave a program that parses
    safetensors and applies deltas: tests/core/test_headers.sh builds every
    combination and checks with nm that what was left out is absent.

MEMORY
======
Every call that allocates takes an options struct holding a wsync_allocator;
a NULL options pointer or an all-zero struct means malloc and free. A parsed
file carries its allocator; wsync_st_free releases everything in one call.
There is no global state but the SIMD paths chosen at first use (see
wsync_diff_impl). wsync_pool is an allocator that keeps freed large
blocks for the next call (an apply every step reuses its pages).

ERRORS
======
Every function that can fail returns a wsync_result (WSYNC_OK is 0) and, when
given a non-NULL wsync_error, fills it: the code, the byte offset in the input
where the failure was found, the tensor involved, and a message naming the
rule that failed. wsync_result_str() describes a code in words for people
("input truncated"); wsync_result_name() gives its enumerator for logs and
for searching this header ("WSYNC_ERR_TRUNCATED"). Bad input never aborts.

A subscriber's codes tell a serving loop what to do next: wait and retry on
WSYNC_ERR_NO_STORE (the store does not exist yet) and WSYNC_ERR_NOT_FOUND
(the store exists, nothing is published yet); stop on WSYNC_ERR_LAYOUT (the
engine's tensors are not the chain's: names, dtypes, shapes, or memory that
overlaps); keep serving on WSYNC_ERR_STALE_HEAD (HEAD names a step older
than the one held: a cached or restored copy, or a restarted chain; the
targets stay where they are); keep serving and raise an alarm on
WSYNC_ERR_SIGNATURE (a subscriber given a verify key found HEAD unsigned,
signed by another key, altered after signing, or another chain's: someone
who can write the bucket, or a publisher without its key; the targets stay
where they are). An object whose hash differs from the signed HEAD's is
WSYNC_ERR_DIGEST_MISMATCH, routed around like a corrupt one.

REVISIONS
=========
    next   signed chains, key files; directory anchors; WSYNC_ERR_NO_PATH; each delta's encoding in HEAD; anchors synced in bounded memory; on_changes and the mirror; measured SIMD paths; WSYNC_NO_CHAIN, WSYNC_NO_ENCODE; wsync_st_parse_header; wsync_error_set; wsync_json_string, _number; model directories (wsync_dir_read, _publish, _follower_*, _pull)
    0.2.0  a damaged or foreign chain refused (WSYNC_CHAIN_NEW_CHAIN); safe retention; prefetch status; capped downloads; wsync_st_check_names; wsync_tensor_dense
    0.1.0  the first release: dtypes, safetensors, wsync64, the SIMD diff, deltas in four encodings, stores, the chain, the fabric interface

LICENSE
=======
MIT, at the bottom of this file.
*/
#ifndef WSYNC_H
#define WSYNC_H

#include <stddef.h>
#include <stdint.h>

#define WSYNC_VERSION_MAJOR 0
#define WSYNC_VERSION_MINOR 2
#define WSYNC_VERSION_PATCH 0
#define WSYNC_VERSION_STRING "0.2.0"
#define WSYNC_VERSION_NUMBER \
    (WSYNC_VERSION_MAJOR * 10000 + WSYNC_VERSION_MINOR * 100 + WSYNC_VERSION_PATCH)

/* Under WSYNC_STATIC a program uses a few of the functions: the rest must
   not warn "defined but not used". */
#if defined(__GNUC__) || defined(__clang__)
#define WSYNC__UNUSED __attribute__((unused))
#else
#define WSYNC__UNUSED
#endif

#ifndef WSYNC_DEF
#ifdef WSYNC_STATIC
#define WSYNC_DEF static WSYNC__UNUSED
#else
#define WSYNC_DEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
   Base: results and errors  >>errors
   ====================================================================== */

/* X(name, value, description). Values are stable: append, never renumber. */
#define WSYNC_RESULT_LIST(X)                                                        \
    X(WSYNC_OK, 0, "ok")                                                            \
    X(WSYNC_ERR_INVALID_ARGUMENT, 1, "invalid argument")                            \
    X(WSYNC_ERR_OUT_OF_MEMORY, 2, "out of memory")                                  \
    X(WSYNC_ERR_IO, 3, "I/O error")                                                 \
    X(WSYNC_ERR_TRUNCATED, 4, "input truncated")                                    \
    X(WSYNC_ERR_HEADER_TOO_LARGE, 5, "header length above the limit")               \
    X(WSYNC_ERR_INVALID_UTF8, 6, "header is not valid UTF-8")                       \
    X(WSYNC_ERR_INVALID_JSON, 7, "header is not valid JSON")                        \
    X(WSYNC_ERR_NESTING_TOO_DEEP, 8, "JSON nesting too deep")                       \
    X(WSYNC_ERR_DUPLICATE_KEY, 9, "duplicate key")                                  \
    X(WSYNC_ERR_INVALID_HEADER, 10, "header does not follow the safetensors schema") \
    X(WSYNC_ERR_INVALID_METADATA, 11, "__metadata__ is not a string-to-string map")  \
    X(WSYNC_ERR_UNKNOWN_DTYPE, 12, "unknown dtype")                                 \
    X(WSYNC_ERR_RANK_TOO_LARGE, 13, "tensor rank above the limit")                  \
    X(WSYNC_ERR_OVERFLOW, 14, "integer or size overflow")                           \
    X(WSYNC_ERR_SIZE_MISMATCH, 15, "shape and dtype disagree with the byte size")   \
    X(WSYNC_ERR_INVALID_OFFSETS, 16, "data offsets overlap, leave a hole or are reversed") \
    X(WSYNC_ERR_OUT_OF_BOUNDS, 17, "data offsets point past the end of the file")   \
    X(WSYNC_ERR_TRAILING_BYTES, 18, "bytes after the last tensor")                  \
    X(WSYNC_ERR_NOT_FOUND, 19, "not found")                                         \
    X(WSYNC_ERR_LIMIT, 20, "a configured limit was exceeded")                       \
    X(WSYNC_ERR_UNSUPPORTED, 21, "unsupported")                                     \
    X(WSYNC_ERR_SINK, 22, "the output sink failed")                                \
    X(WSYNC_ERR_DIGEST_MISMATCH, 23, "digest mismatch")                            \
    X(WSYNC_ERR_BAD_HEAD, 24, "the store's HEAD is not a valid chain pointer")     \
    X(WSYNC_ERR_NO_PATH, 25, "no usable chain of objects reaches the step")        \
    X(WSYNC_ERR_AUTH, 26, "authentication or permission refused")                  \
    X(WSYNC_ERR_CORRUPT, 27, "the data are corrupt: a stream that does not decode") \
    X(WSYNC_ERR_LAYOUT, 28, "the model does not match the chain (names, dtypes, shapes)") \
    X(WSYNC_ERR_NO_STORE, 29, "the store does not exist")                          \
    X(WSYNC_ERR_STALE_HEAD, 30, "HEAD names a step older than the one held")         \
    X(WSYNC_ERR_SIGNATURE, 31, "HEAD is not signed by the key given, or is another chain's")

typedef enum wsync_result {
#define WSYNC__RESULT_ENUM(name, value, text) name = value,
    WSYNC_RESULT_LIST(WSYNC__RESULT_ENUM)
#undef WSYNC__RESULT_ENUM
    WSYNC_RESULT_COUNT
} wsync_result;

/* Optional, caller-owned. Filled on failure (and reset to WSYNC_OK on entry). */
typedef struct wsync_error {
    wsync_result code;
    uint64_t offset;    /* byte offset in the input where it failed; UINT64_MAX if none */
    char tensor[128];   /* tensor involved, "" if none (truncated if longer) */
    char message[384];  /* "tensor 'x' at byte 123: rule that failed" */
} wsync_error;

WSYNC_DEF const char *wsync_result_str(wsync_result r);
/* The result's enumerator as text, e.g. "WSYNC_ERR_TRUNCATED". */
WSYNC_DEF const char *wsync_result_name(wsync_result r);
/* Replaces control characters in a NUL-terminated message with '?' and a
   URL's userinfo (http://user:secret@host) with "***" (every wsync_error
   message has been through it; for text of the caller's own that quotes a
   server, a file or a store's URL). */
WSYNC_DEF void wsync_error_clean(char *m);
/* Fills err (when not NULL) as the library's own failures do and returns
   code: the code, offset UINT64_MAX, no tensor, the message printf-formatted
   (truncated to fit) and cleaned by wsync_error_clean. For a store, a
   fabric or a companion header of the caller's own:
   `return wsync_error_set(err, WSYNC_ERR_IO, "cannot read '%s'", key);`.
   fmt NULL leaves the message empty: wsync_error_set(err, WSYNC_OK, NULL)
   clears err. */
WSYNC_DEF wsync_result wsync_error_set(wsync_error *err, wsync_result code, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ======================================================================
   Base: allocator, overflow-checked sizes  >>alloc
   ====================================================================== */

typedef struct wsync_allocator {
    void *(*alloc)(void *user, size_t size);   /* NULL: default (malloc) */
    void (*free)(void *user, void *ptr);       /* NULL: default (free) */
    void *user;
} wsync_allocator;

/* A caching allocator for a caller that applies a delta every step. Blocks
   of WSYNC_POOL_MIN_BLOCK bytes and up that are freed through it are kept
   (at most keep_bytes of them in all) and handed out again to a request
   they hold without wasting more than they give, so that each apply reuses
   the pages of the one before instead of taking fresh ones from the
   kernel, which zeroes every fresh page on first touch, a cost an apply
   would otherwise pay again on every call. Smaller blocks go straight to `under`. Safe to use from
   several threads. wsync_pool_free releases the kept blocks; every block
   lent out must have been freed before it. A subscriber (wsync_chain)
   keeps one of its own for its applies. */
#define WSYNC_POOL_MIN_BLOCK 65536
typedef struct wsync_pool wsync_pool;
/* NULL when out of memory; under: where blocks come from (NULL: malloc). */
WSYNC_DEF wsync_pool *wsync_pool_new(size_t keep_bytes, const wsync_allocator *under);
WSYNC_DEF wsync_allocator wsync_pool_allocator(wsync_pool *p);
/* Bytes held for reuse now (not counting blocks lent out). */
WSYNC_DEF size_t wsync_pool_kept(wsync_pool *p);
WSYNC_DEF void wsync_pool_free(wsync_pool *p);

/* 1 and *out set on success, 0 (and *out untouched) on overflow. */
WSYNC_DEF int wsync_mul_u64(uint64_t a, uint64_t b, uint64_t *out);
WSYNC_DEF int wsync_add_u64(uint64_t a, uint64_t b, uint64_t *out);
WSYNC_DEF int wsync_mul_size(size_t a, size_t b, size_t *out);
WSYNC_DEF int wsync_add_size(size_t a, size_t b, size_t *out);

/* ======================================================================
   Base: dtypes  >>dtypes
   ====================================================================== */

typedef enum wsync_dtype {
    WSYNC_DTYPE_INVALID = 0,
    WSYNC_DTYPE_BOOL,
    WSYNC_DTYPE_U8,
    WSYNC_DTYPE_I8,
    WSYNC_DTYPE_F8_E4M3,
    WSYNC_DTYPE_F8_E5M2,
    WSYNC_DTYPE_F8_E8M0,
    WSYNC_DTYPE_I16,
    WSYNC_DTYPE_U16,
    WSYNC_DTYPE_F16,
    WSYNC_DTYPE_BF16,
    WSYNC_DTYPE_I32,
    WSYNC_DTYPE_U32,
    WSYNC_DTYPE_F32,
    WSYNC_DTYPE_F64,
    WSYNC_DTYPE_I64,
    WSYNC_DTYPE_U64,
    WSYNC_DTYPE_C64,
    WSYNC_DTYPE_F4,
    WSYNC_DTYPE_F6_E2M3,
    WSYNC_DTYPE_F6_E3M2,
    WSYNC_DTYPE_COUNT
} wsync_dtype;

/* Safetensors spelling ("BF16"), or "INVALID". */
WSYNC_DEF const char *wsync_dtype_name(wsync_dtype t);
/* Exact, case-sensitive match of `len` bytes; WSYNC_DTYPE_INVALID if none. */
WSYNC_DEF wsync_dtype wsync_dtype_from_name(const char *name, size_t len);
/* Bits per element: 1..64 (BOOL is 8; F4 is 4, F6_* are 6); 0 if invalid. */
WSYNC_DEF unsigned wsync_dtype_bits(wsync_dtype t);
/* Bytes of `nelem` elements; fails on overflow or when a sub-byte dtype
   does not fill whole bytes (the safetensors rule). */
WSYNC_DEF wsync_result wsync_dtype_nbytes(wsync_dtype t, uint64_t nelem, uint64_t *out);

/* ======================================================================
   Base: numeric conversions  >>convert
   ====================================================================== */

/* f32 -> bf16, round to nearest, ties to even. Bit-identical to PyTorch's
   tensor.to(torch.bfloat16) for every non-NaN input, subnormals kept (no
   flush to zero). NaN becomes the quiet NaN of the same sign (0x7FC0/0xFFC0). */
WSYNC_DEF uint16_t wsync_f32_to_bf16(float f);
WSYNC_DEF float wsync_bf16_to_f32(uint16_t h);
/* f32 -> IEEE binary16, round to nearest even, subnormals kept, overflow to
   infinity; NaN becomes 0x7E00 with the input's sign. */
WSYNC_DEF uint16_t wsync_f32_to_f16(float f);
WSYNC_DEF float wsync_f16_to_f32(uint16_t h);

/* fp8 rounding modes, always chosen explicitly:
   SATURATE  NVIDIA __NV_SATFINITE: finite results beyond the largest finite
             value and infinities clamp to +-max (448 for e4m3fn, 57344 for
             e5m2).
   TORCH     PyTorch's c10 conversion (non-saturating): e4m3fn has no
             infinity, so a result beyond 448 (|x| > 464) is NaN; e5m2
             overflows to infinity.
   Both round to nearest even, keep subnormals, and map NaN to 0x7F with the
   input's sign. */
typedef enum wsync_fp8_mode {
    WSYNC_FP8_SATURATE = 1,
    WSYNC_FP8_TORCH = 2
} wsync_fp8_mode;

WSYNC_DEF uint8_t wsync_f32_to_e4m3(float f, wsync_fp8_mode mode);
WSYNC_DEF float wsync_e4m3_to_f32(uint8_t v);
WSYNC_DEF uint8_t wsync_f32_to_e5m2(float f, wsync_fp8_mode mode);
WSYNC_DEF float wsync_e5m2_to_f32(uint8_t v);

/* Bulk versions: n elements; buffers need only the natural alignment of their
   element type and must not overlap. */
WSYNC_DEF void wsync_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);
WSYNC_DEF void wsync_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
WSYNC_DEF void wsync_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
WSYNC_DEF void wsync_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
WSYNC_DEF void wsync_f32_to_e4m3_n(const float *src, uint8_t *dst, size_t n, wsync_fp8_mode mode);
WSYNC_DEF void wsync_e4m3_to_f32_n(const uint8_t *src, float *dst, size_t n);
WSYNC_DEF void wsync_f32_to_e5m2_n(const float *src, uint8_t *dst, size_t n, wsync_fp8_mode mode);
WSYNC_DEF void wsync_e5m2_to_f32_n(const uint8_t *src, float *dst, size_t n);

/* ======================================================================
   Base: files  >>files
   ====================================================================== */

/* A whole file, read-only: mmap where available, else read into memory. */
typedef struct wsync_mapped {
    const uint8_t *bytes;   /* never NULL after success, even for an empty file */
    uint64_t size;
    int kind;               /* private */
    void *base;             /* private */
    wsync_allocator allocator;
} wsync_mapped;

WSYNC_DEF wsync_result wsync_file_map(const char *path, wsync_mapped *out, wsync_error *err);
WSYNC_DEF void wsync_file_unmap(wsync_mapped *m);

/* ======================================================================
   Base: hashes and signatures  >>crypto
   ======================================================================
   What a signed chain needs (wsync_chain_options.sign_key, .verify_key),
   in portable C: SHA-256 and SHA-512 (FIPS 180-4), BLAKE2b (RFC 7693,
   unkeyed) and Ed25519 (RFC 8032: keys from a 32-byte seed, signatures,
   strict verification). wsync64 (wsync_digest) catches corruption; these
   hold against an adversary. Byte strings in and out, no allocation, no
   global state. Secret-dependent work (signing, keys) runs without
   branches or table lookups on secret data; verification and the hashes
   handle public data only. */

#define WSYNC_SHA256_SIZE 32
#define WSYNC_SHA512_SIZE 64
#define WSYNC_BLAKE2B_MAX 64      /* BLAKE2b output bytes: 1 to 64 */
#define WSYNC_ED25519_SEED_SIZE 32
#define WSYNC_ED25519_PUBLIC_SIZE 32
#define WSYNC_ED25519_SECRET_SIZE 64 /* the seed, then the public key */
#define WSYNC_ED25519_SIG_SIZE 64

/* Whole messages in one call, or in pieces: init, update any number of
   times with any lengths, final (which does not change the state, as
   wsync_digest_final). */
typedef struct wsync_sha256_state {
    uint32_t h[8];
    uint64_t len;              /* bytes so far */
    size_t nbuf;
    uint8_t buf[64];
} wsync_sha256_state;
WSYNC_DEF void wsync_sha256(const void *data, size_t len, uint8_t out[32]);
WSYNC_DEF void wsync_sha256_init(wsync_sha256_state *s);
WSYNC_DEF void wsync_sha256_update(wsync_sha256_state *s, const void *data, size_t len);
WSYNC_DEF void wsync_sha256_final(const wsync_sha256_state *s, uint8_t out[32]);

typedef struct wsync_sha512_state {
    uint64_t h[8];
    uint64_t len;              /* bytes so far (messages below 2^64 bytes) */
    size_t nbuf;
    uint8_t buf[128];
} wsync_sha512_state;
WSYNC_DEF void wsync_sha512(const void *data, size_t len, uint8_t out[64]);
WSYNC_DEF void wsync_sha512_init(wsync_sha512_state *s);
WSYNC_DEF void wsync_sha512_update(wsync_sha512_state *s, const void *data, size_t len);
WSYNC_DEF void wsync_sha512_final(const wsync_sha512_state *s, uint8_t out[64]);

/* BLAKE2b with outlen bytes of output (1..64; anything else is taken as
   64), no key: b2sum -l (8 * outlen) of the same bytes. */
typedef struct wsync_blake2b_state {
    uint64_t h[8];
    uint64_t t[2];             /* bytes compressed so far */
    size_t nbuf, outlen;
    uint8_t buf[128];
    int impl;                  /* private: the code path (0: AVX2 where the CPU has it) */
} wsync_blake2b_state;
WSYNC_DEF void wsync_blake2b(const void *data, size_t len, uint8_t *out, size_t outlen);
WSYNC_DEF void wsync_blake2b_init(wsync_blake2b_state *s, size_t outlen);
WSYNC_DEF void wsync_blake2b_update(wsync_blake2b_state *s, const void *data, size_t len);
WSYNC_DEF void wsync_blake2b_final(const wsync_blake2b_state *s, uint8_t *out);

/* Ed25519 (RFC 8032, pure Ed25519: no context, no prehash). A key pair
   from a 32-byte random seed: pub the 32-byte public key, sec the 64-byte
   secret key (the seed, then pub: the layout of libsodium's and Go's
   secret keys). sign derives the public key from sec's seed again rather
   than trusting its second half, so a secret key whose halves disagree
   cannot leak the seed through two signatures. verify returns 1 for a
   valid signature and 0 otherwise; it is strict: S at or above the group
   order L (a malleable signature), a public key or R that is not the
   canonical encoding of a curve point, or either of small order, are
   refused; then [S]B = R + [k]A (k = SHA-512(R || A || msg) mod L), R
   compared by its encoding. A message of any length, signed in one
   call. */
WSYNC_DEF void wsync_ed25519_keypair(const uint8_t seed[32], uint8_t pub[32], uint8_t sec[64]);
WSYNC_DEF void wsync_ed25519_sign(const uint8_t sec[64], const void *msg, size_t len, uint8_t sig[64]);
WSYNC_DEF int wsync_ed25519_verify(const uint8_t pub[32], const void *msg, size_t len, const uint8_t sig[64]);

/* HMAC-SHA256 (RFC 2104, RFC 4231): a key of any length (longer than 64
   bytes is hashed first), a message in one call or in pieces. The direct
   path's handshakes and message MACs use it. */
typedef struct wsync_hmac_sha256_state {
    wsync_sha256_state inner, outer;
} wsync_hmac_sha256_state;
WSYNC_DEF void wsync_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t len, uint8_t out[32]);
WSYNC_DEF void wsync_hmac_sha256_init(wsync_hmac_sha256_state *s, const void *key, size_t key_len);
WSYNC_DEF void wsync_hmac_sha256_update(wsync_hmac_sha256_state *s, const void *data, size_t len);
WSYNC_DEF void wsync_hmac_sha256_final(const wsync_hmac_sha256_state *s, uint8_t out[32]);

/* 1 when a and b (n bytes each) are equal, 0 otherwise, in a time that
   depends on n only: for comparing MACs and keys. */
WSYNC_DEF int wsync_ct_equal(const void *a, const void *b, size_t n);

/* n bytes from the system's random source (getrandom, else /dev/urandom):
   WSYNC_OK, or WSYNC_ERR_IO when there is none or it failed (nothing is
   made up: keys and nonces need the real thing). */
WSYNC_DEF wsync_result wsync_random_bytes(void *out, size_t n);

/* Key files for signed chains. NAME.key holds the secret key's 32-byte
   seed as one line, "wsync ed25519 secret " and 64 hex digits; NAME.pub
   the public key, "wsync ed25519 public " and 64 hex digits.
   wsync_keygen makes a key pair from wsync_random_bytes and writes both,
   NAME.key with mode 0600; it never replaces an existing file.
   wsync_key_read_secret fills the 64-byte secret key that
   wsync_chain_options.sign_key takes; it refuses a file that other users
   may read or write (mode & 077, as ssh does) and a public key file.
   wsync_key_read_public fills the 32 bytes .verify_key takes; it refuses
   a secret key file (give the .pub). Each error names the file and the
   rule. */
WSYNC_DEF wsync_result wsync_keygen(const char *name, wsync_error *err);
WSYNC_DEF wsync_result wsync_key_read_secret(const char *path, uint8_t sec[64], wsync_error *err);
WSYNC_DEF wsync_result wsync_key_read_public(const char *path, uint8_t pub[32], wsync_error *err);

/* ======================================================================
   Safetensors: reader  >>st-read
   ====================================================================== */

#define WSYNC_ST_MAX_HEADER_SIZE 100000000u /* the reference implementation's cap */
#define WSYNC_ST_DEFAULT_MAX_RANK 64u
#define WSYNC_ST_DEFAULT_MAX_DEPTH 64u

typedef struct wsync_st_options {
    wsync_allocator allocator;
    uint64_t max_header_size; /* 0: WSYNC_ST_MAX_HEADER_SIZE (also the ceiling) */
    uint32_t max_rank;        /* 0: WSYNC_ST_DEFAULT_MAX_RANK */
    uint32_t max_depth;       /* 0: WSYNC_ST_DEFAULT_MAX_DEPTH (JSON nesting) */
    uint64_t max_tensors;     /* 0: no limit beyond the header size */
} wsync_st_options;

typedef struct wsync_st_tensor {
    const char *name;     /* decoded JSON string, NUL-terminated; see name_len */
    size_t name_len;      /* bytes, excluding the terminator (names may hold \u0000) */
    wsync_dtype dtype;
    uint32_t rank;
    const uint64_t *shape; /* rank entries (NULL when rank is 0) */
    uint64_t nelem;        /* product of shape (1 for a scalar) */
    uint64_t begin, end;   /* data_offsets, relative to the data section */
    const uint8_t *data;   /* view into the caller's buffer: data section + begin */
    uint64_t key_offset;   /* byte offset of the tensor's name in the file */
} wsync_st_tensor;

typedef struct wsync_st_kv {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
} wsync_st_kv;

typedef enum wsync_st_metadata_kind {
    WSYNC_ST_METADATA_ABSENT = 0,
    WSYNC_ST_METADATA_NULL = 1,   /* "__metadata__": null */
    WSYNC_ST_METADATA_OBJECT = 2
} wsync_st_metadata_kind;

typedef struct wsync_st_file {
    const uint8_t *bytes;      /* the caller's buffer */
    uint64_t size;
    uint64_t header_len;       /* N from the first 8 bytes */
    const uint8_t *data;       /* bytes + 8 + header_len */
    uint64_t data_len;
    wsync_st_tensor *tensors;  /* in data-offset order */
    size_t n_tensors;
    wsync_st_metadata_kind metadata_kind;
    wsync_st_kv *metadata;     /* in header order */
    size_t n_metadata;
    /* private */
    const wsync_st_tensor **by_name; /* tensors sorted by name, for lookups */
    void *block;
    wsync_allocator allocator;
} wsync_st_file;

/* Parse and validate `size` bytes. Nothing is copied but names; the buffer must
   outlive `out`. On failure `out` is zeroed and holds nothing to free. */
WSYNC_DEF wsync_result wsync_st_parse(const void *bytes, uint64_t size,
                                      const wsync_st_options *opt, wsync_st_file *out,
                                      wsync_error *err);
/* Parse the header of a file of `file_size` bytes from its first `len`
   bytes (`prefix`), without its data: read 8 bytes, call this, and it says
   how many it needs (the 8-byte length and the header; never more than 8 +
   the header size limit), then read those and call again. Short:
   WSYNC_ERR_TRUNCATED with *need (when need is not NULL) set to the bytes
   it needs, err's offset `len`. Otherwise as wsync_st_parse, every rule
   checked (data offsets against file_size), with *need 0; on success
   out->data and every tensor's data are NULL unless the prefix is the
   whole file (len == file_size), and out->bytes is `prefix`. len >
   file_size is WSYNC_ERR_INVALID_ARGUMENT. */
WSYNC_DEF wsync_result wsync_st_parse_header(const void *prefix, size_t len, uint64_t file_size,
                                             const wsync_st_options *opt, wsync_st_file *out, uint64_t *need,
                                             wsync_error *err);
WSYNC_DEF void wsync_st_free(wsync_st_file *f);
/* Lookup by name (O(log n)); NULL if absent. wsync_st_find takes a C string
   and so finds only names without U+0000: "a" never finds "a\u0000x". */
WSYNC_DEF const wsync_st_tensor *wsync_st_find(const wsync_st_file *f, const char *name);
WSYNC_DEF const wsync_st_tensor *wsync_st_find_n(const wsync_st_file *f, const char *name,
                                                 size_t len);
/* Names holding U+0000 are valid safetensors (the reader accepts them, as
   the reference does) but can never be matched to a wsync_tensor, whose name
   is a C string: read as one, "a\u0000x" would be "a". Whatever matches a
   file's tensors to wsync_tensors (wsync_delta_apply, the subscriber's
   anchors, a program building targets from a file) refuses such a file with
   this check: WSYNC_ERR_UNSUPPORTED naming the first such tensor and the
   byte of its first U+0000, else WSYNC_OK. */
WSYNC_DEF wsync_result wsync_st_check_names(const wsync_st_file *f, wsync_error *err);
/* Metadata value for a key, NUL-terminated; NULL if absent. */
WSYNC_DEF const char *wsync_st_metadata_get(const wsync_st_file *f, const char *key);

/* --- JSON tokens, as the readers above read them >>json ---
   For a program's own JSON reader (a model's config.json), so that it reads
   strings and numbers exactly as the library does. wsync_json_string: the
   string whose opening quote is at text[*pos] (RFC 8259: escapes, \u
   surrogates in pairs, the bytes valid UTF-8), decoded into out[0..cap)
   when out is given (*out_len gets the full decoded length, never more
   than the encoded one); *pos moves past the
   closing quote. wsync_json_number: the number at text[*pos] by RFC
   8259's grammar, *pos moved past it. Either fails with
   WSYNC_ERR_INVALID_JSON, err's offset the byte it is about (a number's:
   where it starts), *pos as it was; out is not NUL-terminated. */
WSYNC_DEF wsync_result wsync_json_string(const char *text, size_t len, size_t *pos, char *out, size_t cap,
                                         size_t *out_len, wsync_error *err);
WSYNC_DEF wsync_result wsync_json_number(const char *text, size_t len, size_t *pos, wsync_error *err);

/* ======================================================================
   Safetensors: writer  >>st-write
   ====================================================================== */

/* Receives the output in order. Returns 0 on success; anything else stops the
   write with WSYNC_ERR_SINK. */
typedef int (*wsync_sink_fn)(void *user, const void *bytes, size_t len);

/* One tensor to write. `data` may be NULL when the bytes are streamed later
   with wsync_st_writer_data(). */
typedef struct wsync_st_tensor_desc {
    const char *name;   /* NUL-terminated, valid UTF-8, not "__metadata__" */
    wsync_dtype dtype;
    uint32_t rank;
    const uint64_t *shape;
    const void *data;
    uint64_t nbytes;    /* must equal shape product times dtype size */
    size_t name_len;    /* 0: strlen(name); set it for names holding NUL bytes */
} wsync_st_tensor_desc;

typedef struct wsync_st_write_options {
    wsync_allocator allocator;
} wsync_st_write_options;

/* A streaming writer: begin() validates everything and emits the header;
   data() appends tensor bytes in the order given (any chunking); end()
   checks that exactly the declared bytes arrived. */
typedef struct wsync_st_writer {
    wsync_sink_fn sink;
    void *user;
    uint64_t header_len;  /* N, a multiple of 8 */
    uint64_t data_len;    /* total data bytes declared */
    uint64_t written;     /* data bytes so far */
    int failed;
} wsync_st_writer;

WSYNC_DEF wsync_result wsync_st_writer_begin(wsync_st_writer *w, const wsync_st_tensor_desc *tensors,
                                             size_t n_tensors, const wsync_st_kv *metadata,
                                             size_t n_metadata, wsync_sink_fn sink, void *user,
                                             const wsync_st_write_options *opt, wsync_error *err);
WSYNC_DEF wsync_result wsync_st_writer_data(wsync_st_writer *w, const void *bytes, size_t len,
                                            wsync_error *err);
WSYNC_DEF wsync_result wsync_st_writer_end(wsync_st_writer *w, wsync_error *err);

/* Whole file in one call, taking each tensor's bytes from its `data`. For
   metadata, key_len/value_len of 0 mean "use strlen". A NULL metadata
   pointer writes no __metadata__; a non-NULL one with n_metadata 0 writes {}. */
WSYNC_DEF wsync_result wsync_st_write(const wsync_st_tensor_desc *tensors, size_t n_tensors,
                                      const wsync_st_kv *metadata, size_t n_metadata,
                                      wsync_sink_fn sink, void *user,
                                      const wsync_st_write_options *opt, wsync_error *err);
/* Exact file size wsync_st_write would produce (header, padding, data), or
   the error it would give. Its duplicate-name check allocates through the
   default allocator; the streaming writer reports the same size
   (8 + header_len + data_len) through the caller's. */
WSYNC_DEF wsync_result wsync_st_write_size(const wsync_st_tensor_desc *tensors, size_t n_tensors,
                                           const wsync_st_kv *metadata, size_t n_metadata,
                                           uint64_t *out, wsync_error *err);
/* A sink over a caller's buffer: wsync_buffer_sink with a wsync_buffer as user. */
typedef struct wsync_buffer {
    uint8_t *bytes;
    size_t cap;
    size_t len;
} wsync_buffer;
WSYNC_DEF int wsync_buffer_sink(void *user, const void *bytes, size_t len);


/* ======================================================================
   Delta: digest and diff  >>digest
   ====================================================================== */

/* A fast 64-bit digest of bytes ("wsync64"): for catching corruption, torn
   writes and wrong bases, not a cryptographic hash. The same value on every
   platform and code path (scalar, SSE2, AVX2, AVX-512). */
WSYNC_DEF uint64_t wsync_digest(const void *bytes, size_t len);

/* The same digest over bytes that arrive in pieces: init, update any number
   of times with any lengths, final (which does not change the state). */
typedef struct wsync_digest_state {
    uint64_t acc[8];
    uint64_t len;
    size_t nbuf;
    uint8_t buf[1024];
} wsync_digest_state;
WSYNC_DEF void wsync_digest_init(wsync_digest_state *s);
WSYNC_DEF void wsync_digest_update(wsync_digest_state *s, const void *bytes, size_t len);
WSYNC_DEF uint64_t wsync_digest_final(const wsync_digest_state *s);

/* Positions where a and b differ bitwise, comparing n elements of `width`
   bytes (1, 2, 4 or 8). Writes ascending element indices to pos (room for n;
   n at most 2^32) and returns how many. One pass over both buffers, with
   SIMD where the CPU has it (chosen at first use: wsync_diff_impl). */
WSYNC_DEF size_t wsync_diff(const void *a, const void *b, size_t n, unsigned width, uint32_t *pos);
/* The portable reference the SIMD paths are tested against. */
WSYNC_DEF size_t wsync_diff_scalar(const void *a, const void *b, size_t n, unsigned width,
                                   uint32_t *pos);

/* Code paths, for tests and benchmarks: force one; AUTO takes the one
   chosen for this process (wsync_diff_impl below). The *_using calls return 0 in *ok (and do nothing) when a path is
   not compiled in or the CPU lacks it. */
typedef enum wsync_impl {
    WSYNC_IMPL_AUTO = 0,
    WSYNC_IMPL_SCALAR,  /* portable C, one element or word at a time */
    WSYNC_IMPL_SSE2,
    WSYNC_IMPL_AVX2,
    WSYNC_IMPL_AVX512,
    WSYNC_IMPL_NEON,
    WSYNC_IMPL_COUNT
} wsync_impl;
WSYNC_DEF const char *wsync_impl_name(wsync_impl impl);
WSYNC_DEF size_t wsync_diff_using(wsync_impl impl, const void *a, const void *b, size_t n,
                                  unsigned width, uint32_t *pos, int *ok);
WSYNC_DEF uint64_t wsync_digest_using(wsync_impl impl, const void *bytes, size_t len, int *ok);
/* wsync_blake2b by one path: SCALAR (portable), AVX2 (x86 with AVX2), or
   AUTO (AVX2 where the CPU has it, as wsync_blake2b always does). */
WSYNC_DEF void wsync_blake2b_using(wsync_impl impl, const void *data, size_t len, uint8_t *out, size_t outlen,
                                   int *ok);

/* AUTO (wsync_diff, wsync_digest and its init/update/final, the *_using
   calls given WSYNC_IMPL_AUTO, and the encoder's diffs) is one path per
   operation, fixed for the process by the first call that needs either:
   - the environment first: WSYNC_DIFF_IMPL names the diff's path,
     WSYNC_DIGEST_IMPL the digest's, WSYNC_SIMD both (a specific one wins),
     spelled as wsync_impl_name spells them: scalar, sse2, avx2, avx512,
     neon. A name this build or this CPU lacks ("auto", a typo, avx512 on an
     AVX2 core, neon for the digest) is ignored, as if unset.
   - else, on x86, the widest path the CPU has (AVX-512 with AVX512BW, else
     AVX2, else SSE2), unless a short measurement at first use finds a
     narrower one clearly faster; deterministic in its result on a given
     machine unless a narrower path there is close to 1.4x faster than the
     widest. The rule: every compiled path the CPU has diffs the same two 2 MiB bf16 images
     (1% of the elements changed) and digests the same 4 MiB; a pass is 9
     rounds, each timing every path once per operation, one right after
     the other (the order reversed every other round), on images evicted
     from the caches (CLFLUSHOPT, or CLFLUSH where the CPU lacks it)
     before each call, at the data offsets tensors have whatever the
     allocator gives: 8 bytes past a 64-byte boundary in the even rounds
     (a safetensors file's data, mapped), 16 in the odd ones (a large
     malloc block). A narrower path replaces
     the widest when its time is at most 1/1.4 of the widest's in the same
     round in at least 5 of the 9 rounds (the median round's ratio at
     least 1.4), and a path narrower still then replaces it by the same
     test against it; it is taken only if a second pass, run right after
     the first, finds the same path. The ratios are of calls made one after
     the other, so a burst of load elsewhere hits both alike; the median
     ignores the rounds it hits unevenly; the 1.4 stands above the noise
     of a loaded machine (the median round's ratio of a narrower path to
     the widest stayed within 0.63-1.33 in 600 passes: 60 processes, half
     beside a memory hog, on a shared 2-core VM; BENCHMARKS.md), and the
     second pass must confirm, so paths within a few tens of percent of
     each other give the widest, the choice the CPUID flags alone make.
     Paths narrower than the widest and 1.5x slower than it on 64 KiB
     images in L2 (scalar, mostly) are not timed from memory. The cost:
     one pass where the widest stays (13-60 ms on a shared 2-core VM, 35 ms
     on an Intel Xeon guest, where CLFLUSH alone had made it 0.4-0.6 s; 8 MiB
     from WSYNC_MALLOC for its duration; the widest if that fails), two
     where it does not. The price of the margin: a narrower path up to
     1.4x faster than the widest is left unused (none is, on the cores
     measured: BENCHMARKS.md); the environment pins another. Only a path
     about 1.4x faster than the widest (within the noise of that figure)
     can be chosen in one process and not in the next.
   - elsewhere (no x86 SIMD compiled): NEON for the diff where compiled,
     else scalar; the digest scalar.
   Thread-safe: first calls made at once may each measure; all then use
   the choice published first. The only global state in wsync.
   wsync_diff_impl and wsync_digest_impl return the choice, making it if
   it is not made yet; never WSYNC_IMPL_AUTO. */
WSYNC_DEF wsync_impl wsync_diff_impl(void);
WSYNC_DEF wsync_impl wsync_digest_impl(void);


/* ======================================================================
   Delta: sparse encodings and apply  >>delta
   ======================================================================
   A delta holds the elements that changed between a base image and the next
   one, as a valid safetensors file, in one of four encodings (FORMATS, at
   the top of this file, documents them byte by byte):
     packed      wsync's own, the default: per tensor one U8 stream of
                 independent blocks, gaps Golomb-Rice coded, values coded as
                 the step from the base value in ordered-integer space;
                 digests of base and result per tensor.
     packed-max  the same container; positions and steps arithmetic-coded
                 with contexts from the base value's exponent.
                 Both: blocks of 2^6..2^20 elements (WSYNC_DELTA_MAX_BLOCK_LOG2).
     trl-v1      {name}.indices I32 + {name}.values, as TRL writes them.
     trl-v3      {name}.idx U16/U32 gaps + {name}.val ("gap_delta").
   Reading detects the encoding. Applying validates the whole delta (and,
   for packed encodings, both digests of every tensor) before it writes a
   single byte. A file cut short fails in its container (WSYNC_ERR_TRUNCATED,
   or WSYNC_ERR_OUT_OF_BOUNDS for data offsets past its end); a stream whose
   bytes do not decode within their declared lengths is WSYNC_ERR_CORRUPT. */

typedef enum wsync_encoding {
    WSYNC_ENCODING_PACKED = 1,
    WSYNC_ENCODING_PACKED_MAX = 2,
    WSYNC_ENCODING_TRL_V1 = 3,
    WSYNC_ENCODING_TRL_V3 = 4
} wsync_encoding;

/* "packed", "packed-max", "trl-v1", "trl-v3"; 0 from _from_name if unknown. */
WSYNC_DEF const char *wsync_encoding_name(wsync_encoding e);
WSYNC_DEF wsync_encoding wsync_encoding_from_name(const char *name);

/* A dense tensor the caller owns (apply writes into data). */
typedef struct wsync_tensor {
    const char *name;      /* NUL-terminated: never U+0000 inside (wsync_st_check_names) */
    wsync_dtype dtype;
    uint32_t rank;
    const uint64_t *shape;
    void *data;
    uint64_t nbytes;       /* shape product times dtype size */
} wsync_tensor;

/* Fills *t in one call: nbytes from dtype and shape, checked for overflow
   (WSYNC_ERR_OVERFLOW), an unknown dtype (WSYNC_ERR_UNKNOWN_DTYPE), a rank
   above WSYNC_ST_DEFAULT_MAX_RANK (WSYNC_ERR_RANK_TOO_LARGE), sub-byte
   elements that do not fill whole bytes (WSYNC_ERR_SIZE_MISMATCH), and a
   missing name, shape (rank > 0) or data (nbytes > 0). Nothing is copied:
   name, shape and data must outlive t. On failure *t is zeroed. */
WSYNC_DEF wsync_result wsync_tensor_dense(wsync_tensor *t, const char *name, wsync_dtype dtype, uint32_t rank,
                                          const uint64_t *shape, void *data, wsync_error *err);

#define WSYNC_DELTA_SKIP_BASE_DIGEST 1u   /* apply: do not verify base digests */
#define WSYNC_DELTA_SKIP_RESULT_DIGEST 2u /* apply: do not verify result digests (they
                                             are what catches a corrupt value code in
                                             a packed stream, which can even give an
                                             element its base value back) */
#define WSYNC_DELTA_UPDATE_BASE 4u        /* encode: copy each changed element into base
                                             as it is found, so base ends equal to next
                                             without a second pass (a publisher's image);
                                             on failure base is partly updated */
#define WSYNC_DELTA_RANGE_CODER 8u        /* encode, packed-max: write the adaptive range
                                             coder (coder 2) that wsync wrote before the
                                             class-Rice coder (coder 3): for readers that
                                             predate coder 3; slower to apply */

#define WSYNC_DELTA_PARTIAL 32u          /* apply: entries naming no target are skipped (an
                                             engine holding part of the model); without
                                             it such an entry is WSYNC_ERR_LAYOUT */
#define WSYNC_DELTA_CHANGES_PARALLEL 16u /* apply: on_changes may be called from the worker
                                             threads at once (never for one tensor from
                                             two threads at once); otherwise only from
                                             the calling thread, one call at a time */

/* The changes an apply made, handed to wsync_delta_options.on_changes (and
   by a mirror's take, see wsync_mirror_take) one chunk at a time, after the
   delta was validated in full and every target written: one tensor after
   another, each tensor's chunks in ascending order of position, the last
   with `last` set. A tensor is handed either as positions or whole:

     positions  positions[0..count) are flat element positions (row-major,
                as the tensor's bytes lie), strictly ascending within the
                tensor across its chunks, each below its element count;
                values holds count new values of width bytes each, in the
                same order, the raw bits as the tensor holds them (little-
                endian). For torch: index_copy_ or a flat scatter with the
                positions as int64 (they are below 2^63).
     whole      (whole 1) the tensor changed whole, or so much of it that
                positions would take more bytes than the tensor: positions
                is NULL, count is the element count, values points at all
                of the tensor's nbytes (the target's own memory, not a copy),
                in one chunk.

   count is at most the chunk size asked for (positions). Every pointer in
   a wsync_changes is valid only during the call. A nonzero return stops the
   handing with WSYNC_ERR_SINK (the return value is in the message); what
   was written stays written. */
typedef struct wsync_changes {
    const wsync_tensor *tensor; /* the target (apply: one of the caller's) */
    size_t index;               /* its index in the targets array given */
    unsigned width;             /* bytes per element */
    int whole;                  /* 1: values are the whole tensor (see above) */
    uint64_t count;             /* positions (values) in this chunk; whole: elements */
    const uint64_t *positions;  /* NULL when whole */
    const void *values;         /* count * width bytes */
    int last;                   /* the tensor's last chunk */
} wsync_changes;

typedef int (*wsync_changes_fn)(void *user, const wsync_changes *c);

/* A merged or reported patch of n positions among `elements` of w bytes is
   handed whole when the positions and values (n * (8 + w) bytes) would be
   more bytes than the whole tensor (elements * w). */
#define WSYNC_CHANGES_WHOLE(n, elements, w) ((n) * (8u + (uint64_t)(w)) > (elements) * (uint64_t)(w))

/* The largest block a packed stream may declare (2^20 elements), written
   or read: the decoders keep a block's worth of scratch per thread (packed
   2^20 times the element width, packed-max about 14 MiB), so a file cannot
   choose more. */
#define WSYNC_DELTA_MAX_BLOCK_LOG2 20u

typedef struct wsync_delta_options {
    wsync_allocator allocator;
    wsync_encoding encoding;   /* encode: 0 means packed */
    uint64_t base_step, step;  /* encode: recorded in __metadata__ */
    uint32_t block_log2;       /* encode, packed*: log2 of elements per block,
                                  6..WSYNC_DELTA_MAX_BLOCK_LOG2 (20); 0: 16 (packed-max 18) */
    unsigned flags;            /* WSYNC_DELTA_* */
    /* encode, packed*: digests already known (e.g. the result digests of the
       previous step are this step's base digests): n entries each, or NULL
       to compute. result_digests_out, when given, receives the digest of
       every next[i]. */
    const uint64_t *base_digests;
    uint64_t *result_digests_out;
    /* encode and apply: worker threads over tensors (0 or 1: the calling
       thread only). With more than one, the allocator must be thread-safe.
       Needs POSIX threads; ignored when built with WSYNC_NO_THREADS. */
    unsigned threads;
    /* apply: when on_changes is given, every change the apply made is
       handed to it (wsync_changes) after the whole delta was validated
       (digests included) and every target written, never before: a delta
       that fails validation makes no call at all. Chunks of at most
       changes_chunk positions (0: 65536), through a buffer of
       changes_chunk * 16 bytes per thread that the apply allocates. The
       positions come from the delta (packed: the write phase keeps the
       changes it decodes, 4 + width bytes each, up to 64 MiB in all, and
       the report decodes the Rice blocks past that again; packed-max: its
       decoded list; trl: its indices), and the values not kept are read
       back from the targets.
       Called from the calling thread unless WSYNC_DELTA_CHANGES_PARALLEL.
       A nonzero return: WSYNC_ERR_SINK, the targets hold the delta's result
       (stats are filled) and the changes after that chunk are not handed. */
    wsync_changes_fn on_changes;
    void *changes_user;
    uint32_t changes_chunk;
} wsync_delta_options;

typedef struct wsync_delta_stats {
    wsync_encoding encoding;
    int has_steps;             /* base_step/step known (packed*: always; trl: model_version) */
    uint64_t base_step, step;
    int has_base;              /* base_step read from the delta (packed*: always; trl:
                                  prev_model_version, which TRL may leave out or set to
                                  -1); 0: base_step is only assumed to be step - 1 */
    uint64_t tensors;          /* dense tensors the delta covers */
    uint64_t changed_tensors;
    uint64_t elements;         /* dense elements covered */
    uint64_t changed;          /* changed elements */
    uint64_t bytes;            /* delta file size */
} wsync_delta_stats;

#ifndef WSYNC_NO_ENCODE
/* Encode base[i] -> next[i] (same name, dtype and shape, i < n) as a delta
   file streamed to the sink. The dense dtypes must have 1, 2, 4 or 8-byte
   elements; trl encodings need fewer than 2^31 elements per tensor. */
WSYNC_DEF wsync_result wsync_delta_encode(const wsync_tensor *base, const wsync_tensor *next, size_t n,
                                          const wsync_delta_options *opt, wsync_sink_fn sink,
                                          void *user, wsync_delta_stats *stats, wsync_error *err);
#endif /* WSYNC_NO_ENCODE */


/* Apply a delta file to the caller's tensors in place (matched by name).
   Everything is validated first: on any failure nothing was written and
   `err` names the tensor and the reason. Tensors the delta does not name
   are left alone; every tensor it names must be among the targets. The
   one exception: WSYNC_ERR_SINK from opt->on_changes comes after the write
   (the targets hold the result). */
WSYNC_DEF wsync_result wsync_delta_apply(const void *delta, uint64_t size, wsync_tensor *targets,
                                         size_t n, const wsync_delta_options *opt,
                                         wsync_delta_stats *stats, wsync_error *err);

/* What a delta file is (encoding, steps, counts) without applying it; checks
   the container, not the streams. */
WSYNC_DEF wsync_result wsync_delta_info(const void *delta, uint64_t size, wsync_delta_stats *out,
                                        wsync_error *err);


#ifndef WSYNC_NO_CHAIN
/* ======================================================================
   Store: the object-store interface and two stores  >>store
   ======================================================================
   The delta chain lives in a store: a flat namespace of keys ("deltas/
   step_000041.safetensors") holding byte objects. A store is a table of
   functions plus a user pointer; wsync.h provides a directory store and a
   memory store, wsync_http.h adds HTTP and S3.

   Keys are '/'-separated, non-empty, without a leading '/', an empty
   segment ("//"), a "." or ".." segment, a trailing '/', or a backslash;
   wsync_store_key_check says why a key is refused. put is atomic: a reader
   sees the whole new object or the old one (or none), never a mixture. */

/* Receives one key from list; returns 0 to continue, anything else stops
   the listing (which then returns WSYNC_OK). */
typedef int (*wsync_key_fn)(void *user, const char *key, uint64_t size);

typedef struct wsync_store {
    void *user;
    wsync_result (*put)(void *user, const char *key, const void *bytes, size_t len, wsync_error *err);
    /* Bytes [offset, offset + len) to the sink (len UINT64_MAX: to the end);
       *size (when not NULL) gets the object's whole size. A range past the
       end is WSYNC_ERR_OUT_OF_BOUNDS; a missing key WSYNC_ERR_NOT_FOUND. */
    wsync_result (*get)(void *user, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                        void *sink_user, uint64_t *size, wsync_error *err);
    wsync_result (*head)(void *user, const char *key, uint64_t *size, wsync_error *err);
    /* Keys starting with prefix ("" for all), in byte order. */
    wsync_result (*list)(void *user, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err);
    wsync_result (*del)(void *user, const char *key, wsync_error *err); /* NOT_FOUND if absent */
    void (*close)(void *user);
} wsync_store;

typedef struct wsync_store_options {
    wsync_allocator allocator;
    int no_fsync; /* directory store: skip fsync (tests, tmpfs); atomicity is kept */
    unsigned flags; /* WSYNC_STORE_* */
} wsync_store_options;

/* Directory store, for readers: never create the root. Opening a root that
   is missing succeeds, and every call returns WSYNC_ERR_NO_STORE while it
   is missing (an engine may start before its trainer; a typo is reported,
   not made into an empty bucket). Without it the root and its parents are
   created at open (a publisher's way). */
#define WSYNC_STORE_NO_CREATE 1u

WSYNC_DEF wsync_result wsync_store_key_check(const char *key, wsync_error *err);
/* The directory store's temporary names contain this (keys may not). */
#define WSYNC_STORE_TMP_MARK ".wsync-tmp."

/* A directory as a store: objects are files under root (created if
   missing, with its parents, unless WSYNC_STORE_NO_CREATE); put writes a temporary file in the same directory, fsyncs it,
   renames it over the key and fsyncs the directory. list walks only the
   directory its prefix names and never into a symbolic link to a directory
   (no loops, nothing outside root); a link to a regular file is listed,
   with its target's size. POSIX only. */
WSYNC_DEF wsync_result wsync_store_dir_open(const char *root, const wsync_store_options *opt, wsync_store *out,
                                            wsync_error *err);
/* In memory, for tests and single-process pipelines; thread-safe. */
WSYNC_DEF wsync_result wsync_store_mem_open(const wsync_store_options *opt, wsync_store *out, wsync_error *err);
WSYNC_DEF void wsync_store_close(wsync_store *s);

/* A whole object into memory from the store's allocator (or the one given);
   free it with the same allocator. */
WSYNC_DEF wsync_result wsync_store_get_all(const wsync_store *s, const char *key, const wsync_allocator *a,
                                           uint8_t **bytes, uint64_t *size, wsync_error *err);

/* get_all for an object of at most max_bytes: a longer one is refused
   (WSYNC_ERR_LIMIT, naming the object and the sizes) having read no more
   than max_bytes of it, whatever the store sends. With
   WSYNC_STORE_GET_EXACT, max_bytes is the size expected (HEAD's, a
   listing's): only bytes [0, max_bytes) are asked for, the store's size
   tells a longer object, and one request is the whole cost (an object found
   shorter is read again whole, for the caller to judge). Without it,
   max_bytes caps an object of unknown size: it is read open-ended and the
   read is cut off (the sink refuses) past max_bytes. */
#define WSYNC_STORE_GET_EXACT 1u
WSYNC_DEF wsync_result wsync_store_get_capped(const wsync_store *s, const char *key, uint64_t max_bytes,
                                              unsigned flags, const wsync_allocator *a, uint8_t **bytes,
                                              uint64_t *size, wsync_error *err);


/* ======================================================================
   Chain: publisher (trainer side) and subscriber (inference side)  >>chain
   ======================================================================
   The chain lives in a store, under an optional prefix:

     anchors/step_000040.safetensors   dense snapshot (a plain safetensors
                                       file; __metadata__ "step": "000040")
     anchors/step_000060/NAME          a model directory's snapshot: its
                                       shards and files (wsync_publisher_set_layout)
     deltas/step_000041.safetensors    delta 40 -> 41, any encoding
     HEAD                              JSON, written last (FORMATS, at the
                                       top of this file, shows one and
                                       specifies every key)

   HEAD names the newest step and every retained object with its base step,
   size, a digest of its bytes and the digest of the model state it leads
   to, and ends with a digest of itself. A subscriber never applies an
   object whose bytes, base step or digests disagree with HEAD; it routes
   around a bad object through an anchor and otherwise stays at the last
   published step it reached. A store without HEAD (a bucket written by
   TRL's delta sync) is read by listing anchors/ and deltas/: each delta's
   base is taken to be the previous step listed, and checked: a delta that
   carries its base (prev_model_version) is held to it, one that does not
   is applied only on the step just before it.

   The state digest of a model: wsync_digest over the little-endian u64
   digests of its tensors' bytes, tensors in byte order of their names. */

/* HEAD is read up to this many bytes (about 130,000 retained objects,
   each delta naming its encoding; about 80,000 in a signed HEAD, which
   names each one's hash); a larger one is refused
   (WSYNC_ERR_LIMIT) with no more than this read. */
#define WSYNC_CHAIN_HEAD_MAX_SIZE ((uint64_t)16 << 20)

#define WSYNC_STEP_LATEST UINT64_MAX
/* Steps are below 10^15 (keys are step_%06llu). */
#define WSYNC_STEP_MAX 999999999999999ull

#define WSYNC_CHAIN_VERIFY_STATE 1u /* subscriber: digest the whole model after every
                                       sync and compare with HEAD's state digest */
#define WSYNC_CHAIN_KEEP_F32 2u     /* publisher: publish F32 tensors as F32 (default:
                                       cast to BF16, round to nearest even) */
#define WSYNC_CHAIN_NEW_CHAIN 4u    /* publisher: start a new chain over a damaged or
                                       foreign one, keeping its objects (see
                                       wsync_publisher_open) */
#define WSYNC_CHAIN_PARTIAL 8u      /* subscriber, mirror: the targets may be a subset of
                                       the chain's tensors (an engine that holds part of
                                       the model); without it the names, dtypes and
                                       shapes must be the chain's exactly. The whole
                                       model's state digest cannot be checked then */
#define WSYNC_CHAIN_FOLLOW_RESTART 16u /* subscriber: follow a HEAD below the step held
                                       (a chain restarted at a lower step) instead of
                                       refusing it with WSYNC_ERR_STALE_HEAD. A signed
                                       chain restarted has a new identity, which a
                                       subscriber with a verify key follows only after
                                       wsync_subscriber_set_chain_id */

typedef struct wsync_chain_options {
    wsync_allocator allocator;
    const char *prefix;        /* objects under "<prefix>/"; NULL or "": the store's root */
    wsync_encoding encoding;   /* publisher: delta encoding; 0: packed */
    uint32_t anchor_every;     /* publisher: an anchor when step - last anchor >= K; 0: 20 */
    double anchor_fraction;    /* publisher: an anchor instead of a delta larger than this
                                  fraction of the full size; 0: 0.5 */
    uint32_t retain;           /* publisher: objects of the last `retain` steps are kept,
                                  plus the newest anchor and everything after it;
                                  0: 2 * anchor_every */
    unsigned threads;          /* encode, apply and digest worker threads; 0 or 1: one */
    unsigned flags;            /* WSYNC_CHAIN_* */
    const char *spool_dir;     /* subscriber: where an anchor is spooled on its way to
                                  targets that hold a step (see wsync_subscriber_open);
                                  NULL or "": $TMPDIR, else /tmp */
    const uint8_t *sign_key;   /* publisher: the Ed25519 secret key that signs every
                                  HEAD, WSYNC_ED25519_SECRET_SIZE (64) bytes as
                                  wsync_ed25519_keypair makes it (the 32-byte seed,
                                  then the public key; copied at open). NULL: HEADs
                                  unsigned. See "Signed chains" below */
    const uint8_t *verify_key; /* subscriber (and mirror, wsync_chain_read): the
                                  publisher's 32-byte Ed25519 public key; HEAD must be
                                  signed by it and every object must match its hash
                                  (copied at open). NULL: no signature is checked */
} wsync_chain_options;

/* Signed chains. wsync64 catches corruption, not an adversary: whoever can
   write the bucket can write objects and a HEAD whose digests match them.
   A publisher given sign_key signs HEAD with Ed25519, and HEAD then names
   a BLAKE2b-256 hash of every object (each file of a directory's anchor)
   and the chain's identity, 16 random bytes chosen when the chain starts
   and kept by every publisher that continues it (FORMATS: HEAD). A
   subscriber given verify_key (the public half) refuses, with
   WSYNC_ERR_SIGNATURE and the targets where they were: a chain without
   HEAD, a HEAD without a signature, one signed by another key, one whose
   bytes changed after signing, and, once it has seen its chain's identity
   (the first HEAD it reads that passes), a HEAD of another chain signed by
   the same key (wsync_subscriber_set_chain_id to follow a new one). An
   object whose BLAKE2b-256 differs from HEAD's is WSYNC_ERR_DIGEST_MISMATCH
   and routed around (hashed on the way as it arrives: an anchor is never
   held for it). An older signed HEAD replayed is WSYNC_ERR_STALE_HEAD, as
   any HEAD below the step held. A publisher with sign_key refuses a chain
   it cannot verify with its own key (unsigned, another key's; a listing
   without HEAD) as it refuses a foreign one, and a publisher without a key
   refuses a signed chain (WSYNC_ERR_SIGNATURE); WSYNC_CHAIN_NEW_CHAIN
   starts a new chain there in either case (how an unsigned chain becomes
   a signed one).

   Why BLAKE2b-256 and not SHA-256: in portable C on 64-bit, SHA-256 ran at
   0.30 GB/s and BLAKE2b at 0.59-0.78 GB/s on the Zen 4 measured, 0.89-0.95
   with its AVX2 path (bench/bench_crypto.c, BENCHMARKS.md "Signed
   chains"): 3.9 s against 1.3-2.0 s of one core for a 1.2 GB anchor, on
   the publisher and on every follower. Each hashes beside the transfer, on
   a thread of its own (a publisher's put, a subscriber's download), so the
   wall time grows only where the hash is slower than the transfer. Only
   signed chains pay it. */
#define WSYNC_CHAIN_HASH_SIZE 32 /* BLAKE2b-256 */
#define WSYNC_CHAIN_ID_SIZE 16

typedef enum wsync_chain_kind {
    WSYNC_CHAIN_ANCHOR = 1,
    WSYNC_CHAIN_DELTA = 2
} wsync_chain_kind;

typedef struct wsync_chain_entry {
    wsync_chain_kind kind;
    uint64_t step;
    uint64_t base;             /* deltas: the step they apply to; anchors: = step */
    uint64_t bytes;            /* object size */
    int has_digests;           /* from HEAD: digest and state below are known */
    uint64_t digest;           /* wsync_digest of the object's bytes */
    uint64_t state;            /* state digest of the model at `step` */
    char key[64];              /* its key without the prefix: from HEAD, made from the
                                  step ("deltas/step_000041.safetensors"); from a
                                  listing, the key as listed ("deltas/step_41.safetensors") */
    wsync_encoding encoding;   /* deltas: their encoding as HEAD records it (the entry's
                                  "encoding"); 0: not recorded (an anchor, a HEAD written
                                  before it was, a listing): the delta's own __metadata__
                                  says, and HEAD's top-level encoding may not be it */
    const struct wsync_chain_file *files; /* a directory's anchor (n_files > 0): its objects,
                                  each at key + name (key is then "anchors/step_NNNNNN/"),
                                  shards first in the tensors' order, then plain files;
                                  bytes is the sum of their sizes and digest wsync64 of
                                  their digests (8 bytes little-endian each, in this
                                  order). Points into the wsync_chain_info holding it */
    size_t n_files;
    int has_hash;              /* HEAD names hash (a signed HEAD names every object's;
                                  a directory's anchor has none: each file has its own) */
    uint8_t hash[WSYNC_CHAIN_HASH_SIZE]; /* BLAKE2b-256 of the object's bytes */
} wsync_chain_entry;

/* One object of a directory's anchor: a shard (a safetensors file holding
   `tensors` of the model's tensors, the next ones in the publish order) or
   a plain file carried with the model (config.json, the index). */
#define WSYNC_CHAIN_FILE_NAME_MAX 128 /* a name's bytes, its terminating NUL included */
#define WSYNC_CHAIN_FILES_MAX 4096    /* objects in one anchor */
typedef struct wsync_chain_file {
    char name[WSYNC_CHAIN_FILE_NAME_MAX]; /* [A-Za-z0-9._-], not starting with '.' */
    uint64_t bytes;            /* its size */
    uint64_t digest;           /* wsync64 of its bytes */
    uint64_t tensors;          /* a shard: how many tensors it holds (at least 1); 0: a plain file */
    uint64_t step;             /* the anchor it belongs to */
    int has_hash;              /* HEAD names hash (a signed HEAD names every file's) */
    uint8_t hash[WSYNC_CHAIN_HASH_SIZE]; /* BLAKE2b-256 of its bytes */
} wsync_chain_file;

/* What a store's chain holds: HEAD parsed, or a listing when there is none. */
typedef struct wsync_chain_info {
    int has_head;              /* 0: built from a listing (no HEAD) */
    uint64_t head_step;        /* newest step */
    uint64_t anchor_step;      /* newest anchor at or before head_step */
    uint64_t head_state;       /* HEAD: state digest at head_step */
    wsync_encoding encoding;   /* HEAD: the encoding its publisher writes deltas in (0:
                                  unknown); each delta's own is its entry's encoding */
    wsync_chain_entry *entries;/* anchors then deltas, each ascending by step */
    size_t n_entries;
    wsync_chain_file *files;   /* every directory anchor's objects, grouped by anchor */
    size_t n_files;
    /* private */
    wsync_allocator allocator;
    /* signed chains (added at the end; FORMATS: HEAD) */
    int has_id;                /* HEAD names the chain's identity */
    uint8_t id[WSYNC_CHAIN_ID_SIZE];
    int has_sig;               /* HEAD carries "signer" and "sig" (verified by
                                  wsync_chain_read only when given verify_key) */
    uint8_t signer[WSYNC_ED25519_PUBLIC_SIZE]; /* the public key HEAD names */
    uint8_t sig[WSYNC_ED25519_SIG_SIZE];
    size_t sig_at;             /* the signature covers HEAD's bytes [0, sig_at) */
} wsync_chain_info;

/* --- Reading the chain; HEAD's text and parser >>chain-head --- */

/* Reads HEAD (or lists, when the store has none): WSYNC_ERR_NOT_FOUND for an
   empty chain, WSYNC_ERR_BAD_HEAD for a HEAD that fails its digest or its
   rules, or a listing that names one step of one kind under two keys
   ("step_7" and "step_000007"; the message names both). */
WSYNC_DEF wsync_result wsync_chain_read(const wsync_store *store, const wsync_chain_options *opt,
                                        wsync_chain_info *out, wsync_error *err);
WSYNC_DEF void wsync_chain_info_free(wsync_chain_info *c);
/* HEAD's text for an info (what the publisher writes), and its parser;
   exposed for tests and fuzzing. The text is allocated from the info's
   allocator (free with it); parsing validates every field. */
WSYNC_DEF wsync_result wsync_chain_head_format(const wsync_chain_info *c, char **text, size_t *len,
                                               wsync_error *err);
WSYNC_DEF wsync_result wsync_chain_head_parse(const void *text, size_t len, const wsync_allocator *a,
                                              wsync_chain_info *out, wsync_error *err);
/* A signed HEAD for c: c must name its identity (has_id) and every
   object's hash (each entry's, each file's); sign_key as
   wsync_chain_options.sign_key. What a publisher given sign_key writes. */
WSYNC_DEF wsync_result wsync_chain_head_format_signed(const wsync_chain_info *c, const uint8_t sign_key[64],
                                                     char **text, size_t *len, wsync_error *err);
/* HEAD's text against a public key: parsed (as wsync_chain_head_parse),
   then signed by verify_key (WSYNC_ERR_SIGNATURE naming the rule: not
   signed, signed by another key, bytes changed after signing). out (NULL:
   not kept) gets the chain; free it with wsync_chain_info_free. */
WSYNC_DEF wsync_result wsync_chain_head_verify(const void *text, size_t len, const uint8_t verify_key[32],
                                               const wsync_allocator *a, wsync_chain_info *out, wsync_error *err);
/* State digest of n tensors (wsync_digest of each, combined as above). */
WSYNC_DEF wsync_result wsync_state_digest(const wsync_tensor *t, size_t n, unsigned threads,
                                          uint64_t *out, wsync_error *err);

#ifndef WSYNC_NO_ENCODE
/* --- Publisher >>publisher --- */

typedef struct wsync_publisher wsync_publisher;

typedef struct wsync_publish_stats {
    uint64_t step;
    int wrote_anchor;          /* an anchor was written for this step */
    int wrote_delta;           /* a delta was written for this step */
    uint64_t base_step;        /* the delta's base (when wrote_delta) */
    uint64_t elements, changed;
    uint64_t delta_bytes, anchor_bytes;
    uint64_t deleted;          /* objects removed by retention */
    uint64_t retention_failed; /* objects retention could not remove (a failed
                                  delete, or a store without del): HEAD still
                                  names them and the next publish tries again */
    uint64_t state;            /* state digest of what was published */
    double encode_seconds;     /* diff and encode (or anchor serialisation) */
    double put_seconds;        /* object puts, HEAD and retention */
} wsync_publish_stats;

/* Opens a publisher on a store (copied; it must stay open). Its state lives
   in the store: a publisher opened on a store with HEAD continues that chain
   (at its first publish it rebuilds the last published image from the store,
   or writes an anchor when it cannot); on an empty store it starts one.
   Over a damaged or foreign chain it refuses, with WSYNC_ERR_BAD_HEAD and a
   message saying what failed, and writes and deletes nothing: a HEAD that
   fails its check, or objects under anchors/ or deltas/ without HEAD (a
   bucket written by TRL, a deleted HEAD). With WSYNC_CHAIN_NEW_CHAIN it
   starts a new chain there instead (over a valid HEAD too): every object
   already in the store is kept (never deleted; remove them by hand if
   wanted) and only steps after the newest one present, found by listing
   anchors/ and deltas/, are published (WSYNC_ERR_UNSUPPORTED when the store
   cannot list). */
WSYNC_DEF wsync_result wsync_publisher_open(const wsync_store *store, const wsync_chain_options *opt,
                                            wsync_publisher **out, wsync_error *err);
/* Publishes `step` (greater than HEAD's; WSYNC_ERR_INVALID_ARGUMENT
   otherwise): a delta against the last published image, an anchor (first
   publish, every anchor_every steps, a change of tensors, or a delta above
   anchor_fraction), or both; then HEAD; then retention, which deletes only
   the objects that the previous HEAD of this chain named and the new one
   does not, never an object no HEAD named. A delete that fails (or a store
   without del) is counted in stats->retention_failed and the object stays
   named in HEAD, so a later publish removes it. Tensors must keep their
   names, dtypes and shapes between steps (a change forces an anchor). BF16
   and other dtypes are published as they are, F32 cast to BF16 unless
   WSYNC_CHAIN_KEEP_F32. Memory: one image of the published model (plus,
   for F32 input, one cast buffer), and a pool of the encodes' memory kept
   between publishes (at most an eighth of the model plus 16 MiB; the delta's
   buffer and the encoder's scratch reuse the same pages every step). */
WSYNC_DEF wsync_result wsync_publish(wsync_publisher *p, uint64_t step, const wsync_tensor *tensors,
                                     size_t n, wsync_publish_stats *stats, wsync_error *err);
/* 1 and *step set when the chain has a HEAD step. */
WSYNC_DEF int wsync_publisher_head(const wsync_publisher *p, uint64_t *step);
WSYNC_DEF void wsync_publisher_close(wsync_publisher *p);

/* A model kept as a directory (a Hugging Face checkpoint: shards, an index,
   config files): its anchors keep that layout. Each anchor is then written
   as one object per shard, a plain safetensors file of the shard's tensors
   (the same bytes a loader reads), plus the files given, byte for byte,
   all under "anchors/step_NNNNNN/", and HEAD names each with its size and
   digest (HEAD version 2). Shards name consecutive runs of the tensors
   given to wsync_publish, in order, and together all of them; a name is
   [A-Za-z0-9._-], not starting with '.', under WSYNC_CHAIN_FILE_NAME_MAX
   bytes, and unique among shards and files. Everything is copied. A layout
   that differs from the one of HEAD's newest anchor (names, tensor counts,
   the files' bytes) makes the next publish write an anchor, so that the
   chain's newest anchor always carries the current files. With no shards
   (n_shards 0) anchors are one object again.
   A shard's metadata (the trainer's __metadata__, in its order; lengths of
   0 mean strlen) is copied into its anchor object, in that order, then
   "wsync" "anchor", then "format" "pt" and "step" where the trainer had
   none; a trainer's "step" keeps its place and takes the anchor's step. So
   a subscriber rebuilds the trainer's header from the keys before "wsync".
   "wsync" is refused, and "format" other than "pt". Metadata is read at an
   anchor only: a change of it alone writes no anchor. Zero the struct
   before setting its fields ({0} or memset): fields added later are 0. */
typedef struct wsync_anchor_shard {
    const char *name;
    size_t first, count;       /* tensors[first .. first + count) of each wsync_publish */
    const wsync_st_kv *metadata;   /* NULL (n_metadata 0): none */
    size_t n_metadata;
} wsync_anchor_shard;
typedef struct wsync_anchor_file {
    const char *name;
    const void *data;
    uint64_t size;
} wsync_anchor_file;
WSYNC_DEF wsync_result wsync_publisher_set_layout(wsync_publisher *p, const wsync_anchor_shard *shards,
                                                  size_t n_shards, const wsync_anchor_file *files, size_t n_files,
                                                  wsync_error *err);
#endif /* WSYNC_NO_ENCODE */

/* WSYNC_OK when name may name an anchor's object (the rules above). */
WSYNC_DEF wsync_result wsync_chain_file_name_check(const char *name, wsync_error *err);

/* --- Subscriber >>subscriber --- */

typedef struct wsync_subscriber wsync_subscriber;

typedef struct wsync_sync_stats {
    int had_step;
    uint64_t from_step;        /* where the targets were (when had_step) */
    uint64_t step;             /* where they are now (valid when the subscriber has a step) */
    uint64_t head_step;
    int verified;              /* 1: planned from HEAD, every object checked against its
                                  digests; 0: read from a listing (no HEAD: sizes only,
                                  no digests), or nothing was planned */
    unsigned anchors, deltas;  /* objects applied */
    unsigned rejected;         /* objects refused (digest, container, order), routed around */
    uint64_t bytes_fetched;
    char path[160];            /* "deltas 41..43", "anchor 40 + deltas 41..43", "none" */
} wsync_sync_stats;

/* A subscriber updating the caller's tensors in place (matched by name; the
   memory stays the caller's and must outlive the subscriber). It starts
   without a step: the first sync loads an anchor.

   The model's edge: the targets' names, dtypes and shapes must be the
   chain's exactly (WSYNC_CHAIN_PARTIAL: a subset of them), checked against
   each anchor's header and each delta's entries before a byte moves;
   otherwise WSYNC_ERR_LAYOUT, the message giving both dtypes and shapes.
   Targets with the same memory, size and dtype (tied weights) are one
   tensor with two names: the chain must hold equal bytes under both
   (checked before anything is written) and each change is written once;
   memory that overlaps otherwise is refused here (WSYNC_ERR_INVALID_ARGUMENT,
   naming both), as are two targets with one name (WSYNC_ERR_DUPLICATE_KEY). Its applies allocate
   through a wsync_pool of its own, which keeps up to an eighth of the
   model's bytes and 16 MiB between syncs (released by
   wsync_subscriber_close).

   Memory: a delta is held whole while it is checked and applied; an anchor
   (a whole model) never is. The memory a sync takes beyond the targets is
   the largest delta object plus the applies' scratch, and for an anchor its
   header (parsed: about three times the header's size, a few MiB for 10^4
   tensors) and nothing of its data:
     - targets without a step (the first sync, or after a failure that left
       none) take the anchor straight from the store as it arrives, the
       header checked against the targets (names, dtypes, shapes) before a
       byte is written and the digest of the whole object against HEAD's at
       the end; an anchor found bad once its data began to arrive leaves them
       zeroed (every target), with no step, as they were (one found bad in
       its header or size leaves them untouched);
     - targets that hold a step keep it until the anchor is proven good: the
       anchor goes to a spool file first, its digest checked on the way, and
       only then is it read from the file into the targets. The spool file is
       created exclusively (mode 0600) in wsync_chain_options.spool_dir (NULL
       or "": $TMPDIR, else /tmp) and unlinked as soon as it is open, so it
       never outlives the sync (nor a crash); it needs the anchor's size in
       free disk space, and a sync that cannot create or write it fails with
       WSYNC_ERR_IO naming the file, the targets untouched. An I/O error
       reading it back (after the digest matched) leaves the targets with no
       step. The background prefetch spools every anchor it fetches the same
       way and keeps the open file until apply_ready copies it in.
   Without POSIX files, and for an anchor whose size is unknown (a listing
   that gives none), the anchor is read whole into memory as before. */
WSYNC_DEF wsync_result wsync_subscriber_open(const wsync_store *store, wsync_tensor *targets, size_t n,
                                             const wsync_chain_options *opt, wsync_subscriber **out,
                                             wsync_error *err);
/* The caller vouches that the targets hold `step` (e.g. a file written by an
   earlier pull). Packed deltas check it through their base digests. */
WSYNC_DEF void wsync_subscriber_set_step(wsync_subscriber *s, uint64_t step);
/* With verify_key: the identity of the chain followed, the first that
   passed (1 and id set), or 0 before any. set_chain_id pins one (a
   follower restarted that knows its chain: the id from an earlier run),
   or with NULL forgets it, so the next HEAD that passes is followed (a new
   chain started by the same trainer; the targets keep their step). */
WSYNC_DEF int wsync_subscriber_chain_id(const wsync_subscriber *s, uint8_t id[16]);
WSYNC_DEF void wsync_subscriber_set_chain_id(wsync_subscriber *s, const uint8_t id[16]);
/* 1 and *step set when the targets hold a known step. */
WSYNC_DEF int wsync_subscriber_step(const wsync_subscriber *s, uint64_t *step);
/* Brings the targets to `step` (WSYNC_STEP_LATEST: HEAD's) along the
   cheapest path in bytes. On failure the targets hold the last published
   step reached (see wsync_subscriber_step), never a mixture, and `err`
   names the object and the reason. WSYNC_STEP_LATEST never moves them to a
   step below the one held: a HEAD that names one is WSYNC_ERR_STALE_HEAD,
   the targets untouched (also in the prefetch's status), unless
   WSYNC_CHAIN_FOLLOW_RESTART, which takes it for a restarted chain and
   loads its anchor. A lower step asked for by number is taken. */
WSYNC_DEF wsync_result wsync_subscriber_sync(wsync_subscriber *s, uint64_t step, wsync_sync_stats *stats,
                                             wsync_error *err);
/* --- Subscriber: the background prefetch >>prefetch --- */

/* Background prefetch: a thread polls HEAD every interval_ms and downloads
   and checks (digests, container) the objects leading to the newest step it
   can reach, touching nothing of the targets. Like sync it routes around a
   bad object, and when no good objects lead to HEAD it offers the furthest
   step they do lead to (9, say, before a corrupt delta 10). An object
   refused by the prefetch, apply_ready or sync is remembered by key, size
   and HEAD's digest, and the prefetch does not fetch it again until the
   store gives that key another size or digest (sync still tries everything,
   and an object it applies is forgiven). After a poll that failed without
   offering anything the interval doubles, up to 64 times and a minute; a
   poll that does not fail brings it back. Needs POSIX threads.

   Threads: sync, set_step, start, stop, apply_ready and close belong to the
   engine's thread (one at a time); ready, step and prefetch_status may be
   called from any. sync may be called while the prefetch runs: the prefetch
   waits while the targets move, and a prefetch planned from a step the
   targets no longer hold is dropped, never applied. The store and the
   allocator are used from both threads. */
WSYNC_DEF wsync_result wsync_subscriber_start(wsync_subscriber *s, unsigned interval_ms, wsync_error *err);
/* 1 and *step set when prefetched objects lead from the targets' step to a
   newer one. */
WSYNC_DEF int wsync_subscriber_ready(wsync_subscriber *s, uint64_t *step);
/* Applies what was prefetched, in the caller's thread, at a point the caller
   chooses (between batches); the same guarantees and errors as sync. WSYNC_OK
   and stats->path "none" when nothing is ready. */
WSYNC_DEF wsync_result wsync_subscriber_apply_ready(wsync_subscriber *s, wsync_sync_stats *stats,
                                                    wsync_error *err);

/* What the prefetch is doing, read without stopping it. The engine has
   caught up with HEAD when caught_up is 1; when caught_up and ready stay 0
   over polls the prefetch cannot get further, and last_error says why. */
typedef struct wsync_prefetch_status {
    int running;               /* the thread runs */
    uint64_t polls;            /* polls done since the subscriber opened */
    int head_known;            /* the last read of the chain (a poll's or a sync's) worked */
    uint64_t head_step;        /* the newest step it found (HEAD's, or a listing's) */
    int ready;                 /* as wsync_subscriber_ready */
    uint64_t ready_step;
    int caught_up;             /* the targets hold head_step */
    unsigned refused;          /* objects refused and not fetched again */
    unsigned interval_ms;      /* the poll interval now, after any backoff */
    wsync_result last_result;  /* the last failure (a poll's or apply_ready's); WSYNC_OK: none */
    wsync_error last_error;    /* its error: names the object (or HEAD) and the rule */
    double last_error_time;    /* when, in seconds since the epoch; 0 if none */
} wsync_prefetch_status;

WSYNC_DEF wsync_result wsync_subscriber_prefetch_status(wsync_subscriber *s, wsync_prefetch_status *out);
/* Stops the background thread (close does too). */
WSYNC_DEF void wsync_subscriber_stop(wsync_subscriber *s);
WSYNC_DEF void wsync_subscriber_close(wsync_subscriber *s);

/* --- Mirror: a host copy that hands an engine its changes >>mirror --- */

/* Every apply of a subscriber (sync, apply_ready) hands its changes to fn,
   as wsync_delta_options.on_changes does (wsync_changes; index: the
   target's index as given to wsync_subscriber_open): a delta's after it was
   verified and written, an anchor's as whole tensors after it was written.
   chunk: positions per chunk (0: 65536); flags: 0 or
   WSYNC_DELTA_CHANGES_PARALLEL. A nonzero return stops the sync or
   apply_ready with WSYNC_ERR_SINK, the targets at the step of the object
   just applied (wsync_subscriber_step says which). fn NULL: no calls. From
   the engine's thread, while no sync or apply_ready runs. */
WSYNC_DEF void wsync_subscriber_on_changes(wsync_subscriber *s, wsync_changes_fn fn, void *user, uint32_t chunk,
                                           unsigned flags);

/* A mirror is a subscriber whose targets are a host copy of the model, for
   an engine whose weights wsync cannot write (GPU memory). Its background
   thread does everything but the engine's part: the subscriber's prefetch
   polls HEAD, fetches and checks objects; the mirror's thread applies them
   to the mirror, a whole published step at a time under the mirror's lock,
   checks the state digest (WSYNC_CHAIN_VERIFY_STATE is always on) and
   records what changed. The engine calls wsync_mirror_take between batches
   and is handed, already verified, every change since its last take; only
   then is it at the new step (wsync_mirror_engine_step).

   Recording, per tensor: a log or a bitmap. While one applied delta
   changed the tensor since the last take, its changes are kept in the log
   as the apply reported them (positions and values, 8 + width bytes a
   change), and a take hands them straight from it: the engine's pause is
   its own copying, no walk and no reads from the mirror. When a second
   delta changes the tensor before a take, the log is folded into the
   bitmap (one bit per element: for bf16 a sixteenth of the model's bytes,
   allocated at open), which then gathers the union of the positions; a
   take hands them each with the value the mirror holds then (the newest).
   An anchor, a subscriber that lost its step (a state digest that failed,
   a corrupt object it could not route around), and a tensor whose patch
   reaches WSYNC_CHANGES_WHOLE mark the tensor whole. So the engine moves
   from its step to the mirror's in one merged patch however many steps,
   anchors, rejected objects or restarts lay between, never to a mixture:
   takes and applies exclude each other, and a take while the mirror holds
   no verified step hands nothing.

   Memory: the model once (the caller's tensors, or wsync's), the bitmaps,
   the logs (each at most its tensor's bytes, all together at most the
   model's; kept between takes; a log that cannot grow is folded into the
   bitmap), the take's chunk buffer (chunk * 16 bytes), and the
   subscriber's. */
typedef struct wsync_mirror wsync_mirror;

typedef struct wsync_mirror_options {
    wsync_chain_options chain; /* the subscriber's: prefix, allocator, threads, flags */
    unsigned interval_ms;      /* the prefetch's HEAD poll (wsync_mirror_start); 0: 1000 */
    uint32_t chunk;            /* take: positions per chunk; 0: 65536 */
    int no_wait;               /* take: while the mirror is applying, return at once with
                                  nothing handed (stats->busy) instead of waiting */
} wsync_mirror_options;

typedef struct wsync_mirror_stats {
    int had_step;              /* the engine held a step before the take */
    uint64_t from_step;        /* that step */
    int has_step;              /* the engine holds a step now */
    uint64_t step;             /* that step (the mirror's when the take handed it) */
    int handed;                /* 1: the engine was handed the mirror's step */
    int busy;                  /* no_wait: the mirror was applying, nothing handed */
    uint64_t steps;            /* objects the mirror applied since the last take (merged) */
    unsigned anchors, deltas;  /* of them, anchors and deltas (a handed take only) */
    uint64_t bytes_fetched;    /* their bytes, and those of objects fetched and refused */
    uint64_t tensors;          /* tensors handed */
    uint64_t whole_tensors;    /* of them, handed whole */
    uint64_t positions;        /* positions handed (each once, however many steps) */
    uint64_t bytes;            /* bytes handed: positions * (8 + width) + whole tensors' bytes */
    uint64_t chunks;           /* callback calls */
    uint64_t record_bytes;     /* the change records' memory (the bitmaps and the logs) */
    double pause_seconds;      /* time inside the take, callback included: the engine's pause */
    double wait_seconds;       /* of which waiting for an apply to finish */
} wsync_mirror_stats;

/* Opens a mirror on a store. With tensors (n of them; names, dtypes and
   shapes as a subscriber's targets) the mirror is the caller's memory, which
   must outlive it; with tensors NULL the mirror is allocated by wsync from
   the tensor list of the store's newest anchor (its header alone is read;
   WSYNC_ERR_NOT_FOUND for an empty chain), as one block laid out as the
   anchor's data section. Either way its content is unknown until the first
   apply: the engine's first take hands every tensor whole. No thread runs
   until wsync_mirror_start. */
WSYNC_DEF wsync_result wsync_mirror_open(const wsync_store *store, wsync_tensor *tensors, size_t n,
                                         const wsync_mirror_options *opt, wsync_mirror **out, wsync_error *err);
/* The mirror's tensors (n of them); valid until close. Read them while no
   apply runs (inside a take's callback, or with no thread started). */
WSYNC_DEF const wsync_tensor *wsync_mirror_tensors(const wsync_mirror *m, size_t *n);
/* The background: the subscriber's prefetch (every interval_ms) and the
   mirror's thread, which applies what is ready. Needs POSIX threads. */
WSYNC_DEF wsync_result wsync_mirror_start(wsync_mirror *m, wsync_error *err);
WSYNC_DEF void wsync_mirror_stop(wsync_mirror *m);
/* Moves the mirror (not the engine) to `step` (WSYNC_STEP_LATEST: HEAD's)
   in the caller's thread, as wsync_subscriber_sync, recording the changes;
   for callers without the background (tests, WSYNC_NO_THREADS). It holds
   the mirror's lock throughout (fetches included). */
WSYNC_DEF wsync_result wsync_mirror_sync(wsync_mirror *m, uint64_t step, wsync_sync_stats *stats,
                                         wsync_error *err);
/* The caller vouches that the mirror AND the engine hold `step` (loaded from
   the same checkpoint): nothing is recorded as pending. */
WSYNC_DEF wsync_result wsync_mirror_set_step(wsync_mirror *m, uint64_t step, wsync_error *err);
/* Hands the engine every change since its last take, merged, through fn
   (wsync_changes: index is the tensor's index in wsync_mirror_tensors;
   positions ascending per tensor, chunks of at most opt.chunk positions; a
   whole tensor in one call pointing at the mirror's memory), in the
   caller's thread, under the mirror's lock: no apply runs meanwhile. Then
   the engine is at the mirror's step (stats->handed 1). Nothing pending, or
   no verified step in the mirror (none yet, or it lost its step to a
   failed check): WSYNC_OK, no call, stats->handed 0, the engine where it
   was.
   A nonzero return from fn: WSYNC_ERR_SINK; the engine holds a mixture and
   has no step (wsync_mirror_engine_step 0) until the next take, which hands
   again everything not handed, and the refused tensor whole. stats, when
   given, are filled either way. */
WSYNC_DEF wsync_result wsync_mirror_take(wsync_mirror *m, wsync_changes_fn fn, void *user,
                                         wsync_mirror_stats *stats, wsync_error *err);
/* 1 and *step set when the engine holds a step (its last take's). */
WSYNC_DEF int wsync_mirror_engine_step(wsync_mirror *m, uint64_t *step);
/* 1 and *step set when the mirror holds a verified step. */
WSYNC_DEF int wsync_mirror_step(wsync_mirror *m, uint64_t *step);
/* 1 and *digest set to the state digest (wsync_state_digest) of what the
   engine was handed at its last take: HEAD's for that step, checked on the
   mirror (or computed from it when the chain has no digests). An engine
   that reads its weights back can compare. */
WSYNC_DEF int wsync_mirror_state_digest(wsync_mirror *m, uint64_t *digest);
/* The mirror's subscriber, for wsync_subscriber_prefetch_status (the
   failures of the background's polls and applies); nothing else. */
WSYNC_DEF wsync_subscriber *wsync_mirror_subscriber(wsync_mirror *m);
WSYNC_DEF void wsync_mirror_close(wsync_mirror *m);

/* --- Engine map: a mirror's changes into an engine's own parameters >>engine-map --- */

/* An engine (vLLM, SGLang) holds parameters, not checkpoint tensors: fused
   (qkv_proj is q, k and v stacked; gate_up_proj) and sharded for tensor
   parallelism (column-parallel along dim 0, row-parallel along dim 1, the
   vocabulary split with padding rows). A map describes each parameter as
   the concatenation, along one dim, of slices of checkpoint tensors taken
   along that same dim (every other dim equal), then `pad` entries along
   the dim that are never written:

       qkv_proj.weight (rank 0 of 2), dim 0:
           q_proj.weight [0, 1024), k_proj.weight [0, 512), v_proj.weight [0, 512)
       o_proj.weight (rank 1 of 2), dim 1: o_proj.weight [1024, 2048)
       embed_tokens.weight (rank 1 of 2), dim 0: embed_tokens.weight [75968, 151936), pad 64

   A parameter with no pieces is the checkpoint tensor of its name, whole.
   This is the direct path's description (wsync_rdma.h: a wsync_plan_unit
   is pieces of sources concatenated by rows): a piece along dim 0 is a
   wsync_plan_piece of rows [start, start + length), all columns; a piece
   along dim 1 of a matrix is one of all rows, columns [start, start +
   length). The map is checked against the checkpoint's tensors (the
   mirror's, which are the chain's layout) before any byte moves: each
   piece names a tensor of the same dtype and rank whose other dims equal
   the parameter's, inside it; the pieces and the pad fill the parameter's
   dim exactly; no element of a tensor lands in two places; and every
   element of every tensor is covered (WSYNC_MAP_SHARD: a rank's share,
   which touches every tensor; wsync_engine_map_check checks that the
   union of every rank's maps covers each element).
   Tied parameters are the one exception to "two places": two parameters
   with the same dtype, shape, dim, pieces and pad (an lm_head tied to the
   embedding: lm_head.weight with the piece embed_tokens.weight [0, V),
   for a checkpoint that has no lm_head.weight) each get the changes.
   Refusals are WSYNC_ERR_LAYOUT naming the parameter and the piece (and
   for a part not covered, the tensor, the part, and the piece that ends
   there). */
#define WSYNC_MAP_SHARD 1u /* this map is one rank's share: tensors may be covered in part */

typedef struct wsync_map_piece {
    const char *tensor;       /* a checkpoint tensor's name */
    uint64_t start, length;   /* its slice [start, start + length) along the parameter's dim */
} wsync_map_piece;

typedef struct wsync_map_param {
    const char *name;         /* the engine's parameter */
    wsync_dtype dtype;        /* its pieces' tensors' dtype (no conversion) */
    uint32_t rank;
    const uint64_t *shape;    /* the parameter's shape: shape[dim] = the lengths + pad */
    uint32_t dim;             /* the dim the pieces are concatenated along */
    const wsync_map_piece *pieces;
    size_t n_pieces;          /* 0: the checkpoint tensor named `name`, whole */
    uint64_t pad;             /* trailing entries along dim, never written */
    void *data;               /* optional: the parameter's host memory (row-major): wsync_engine_take
                                 writes its changes there itself (read at each take) */
} wsync_map_param;

typedef struct wsync_map_rank {
    const wsync_map_param *params;
    size_t n;
} wsync_map_rank;

/* One parameter's changes, from one checkpoint tensor: positions in the
   parameter's flat element index space (row-major), ascending within a
   call; values count elements of width bytes (the raw bits). A parameter
   fed by several pieces gets calls for each; a tensor handed whole by the
   mirror comes as every position of the slice. With WSYNC_ENGINE_MERGE
   (wsync_engine_open) a parameter gets one call per take instead: all its
   changes, positions ascending, once the take has handed the last tensor
   feeding it (tensor NULL when several did). Valid only during the call;
   a nonzero return stops the take (wsync_mirror_take's WSYNC_ERR_SINK).
   The end call (wsync_engine_open's WSYNC_ENGINE_END_CALL): param NULL,
   tensor NULL, index SIZE_MAX, count 0, positions and values NULL, after
   the take's last change and before the take records the engine's step:
   a sink that defers work (an upload, a scatter on a device) does it
   there, and refuses the whole take with a nonzero return. */
#define WSYNC_ENGINE_END_CALL 2u /* wsync_engine_open: fn gets an end call at each take that hands changes */
#define WSYNC_ENGINE_MERGE 4u    /* wsync_engine_open: one call per parameter per take, positions ascending */
typedef struct wsync_param_changes {
    const wsync_map_param *param;
    size_t index;             /* the parameter's index in the map */
    const char *tensor;       /* the checkpoint tensor they come from */
    unsigned width;
    uint64_t count;
    const uint64_t *positions;
    const void *values;
} wsync_param_changes;
typedef int (*wsync_param_changes_fn)(void *user, const wsync_param_changes *c);
/* WSYNC_ENGINE_MERGE: before parameter `index`'s call, where its count
   positions and count * width value bytes go (a sink's staging buffer: the
   take writes them there itself, merged); *positions or *values left
   NULL: the engine's memory. Nonzero refuses the take as fn's return does. */
typedef int (*wsync_param_reserve_fn)(void *user, size_t index, uint64_t count, unsigned width,
                                      uint64_t **positions, void **values);

typedef struct wsync_engine_stats {
    wsync_mirror_stats mirror; /* the take (pause_seconds: the engine's whole pause) */
    uint64_t params;           /* parameters that received changes */
    uint64_t positions;        /* positions handed to this rank's parameters */
    uint64_t bytes;            /* positions * (8 + width) */
    uint64_t calls;            /* callback calls (or scatters; WSYNC_ENGINE_MERGE: one a parameter) */
} wsync_engine_stats;

typedef struct wsync_engine wsync_engine;

/* Checks n_ranks maps against the checkpoint's tensors: each as a rank's
   share (WSYNC_MAP_SHARD), then that together they split every tensor
   exactly once: every element covered, and two ranks' slices of a tensor
   either disjoint or the same slice (a replica: a norm every rank holds
   whole, a KV head two ranks hold). A part no rank holds, and slices that
   overlap otherwise, are refused, naming the parameter, piece and rank.
   One rank's whole map: n_ranks 1. */
WSYNC_DEF wsync_result wsync_engine_map_check(const wsync_tensor *tensors, size_t n, const wsync_map_rank *ranks,
                                              size_t n_ranks, wsync_error *err);
/* A map over a mirror (which must outlive it), checked against the
   mirror's tensors (flags: WSYNC_MAP_SHARD, WSYNC_ENGINE_END_CALL,
   WSYNC_ENGINE_MERGE). The params (names, shapes, pieces, data) must outlive it. */
WSYNC_DEF wsync_result wsync_engine_open(wsync_mirror *m, const wsync_map_param *params, size_t n, unsigned flags,
                                         wsync_engine **out, wsync_error *err);
/* wsync_mirror_take through the map: each change of a checkpoint tensor is
   translated into the parameters holding it on this rank (others dropped)
   and written into the parameter's data when it has some (a scatter in
   the take's thread), else handed to fn (fn NULL: every parameter needs
   data, else WSYNC_ERR_INVALID_ARGUMENT before anything moves). The
   mirror's rules hold: merged since the last take, all or nothing per
   step, a refusal re-handed at the next take. A take drains the mirror's
   records: one engine map per mirror (a mirror per rank), one take at a
   time.
   With WSYNC_ENGINE_END_CALL, a take that hands changes (to fn or not:
   another rank's alone count) ends with one end call to fn (see
   wsync_param_changes), under the mirror's lock, before the engine's step
   is recorded. Its nonzero return refuses the take as any call's does
   (WSYNC_ERR_SINK, the engine without a step), and with the flag a
   refusal, the end call's or any call's, does more: every tensor this
   take handed is handed again, whole, at the next take, since the sink
   may have written none of it.
   With WSYNC_ENGINE_MERGE the changes of parameters without data are
   gathered during the take and handed one call each (memory: the pending
   parameters' changes; a first, whole take gathers each parameter whole),
   and any refusal makes every tensor of the take whole again, as above. */
WSYNC_DEF wsync_result wsync_engine_take(wsync_engine *e, wsync_param_changes_fn fn, void *user,
                                         wsync_engine_stats *stats, wsync_error *err);
/* WSYNC_ENGINE_MERGE: the reserve of the takes after it (fn NULL: none). */
WSYNC_DEF void wsync_engine_reserve(wsync_engine *e, wsync_param_reserve_fn fn, void *user);
WSYNC_DEF void wsync_engine_close(wsync_engine *e);

/* --- Model directories: a checkpoint directory published and followed >>dir ---
   A Hugging Face checkpoint directory (what save_pretrained writes): its
   shards (model.safetensors, or the model-0000K-of-0000N.safetensors that
   model.safetensors.index.json names), the index, and the small files an
   engine loads with them (config.json, the tokenizer's). POSIX.1-2008:
   the implementation's file needs _POSIX_C_SOURCE 200809L (or
   _GNU_SOURCE) before its first #include; without it (strict C99 on
   glibc) every wsync_dir_ function fails with WSYNC_ERR_UNSUPPORTED.

   Publishing. wsync_dir_read reads and checks a directory, nothing
   written: the shards are the files the index's "weight_map" names (it
   must name exactly the shards' tensors, each with the shard holding it;
   another *.safetensors there is refused), or without an index every
   *.safetensors; every shard parses and holds a tensor, no tensor is in
   two shards, names are plain file names (wsync_chain_file_name_check; a
   weight_map entry "../x" or "/abs/x" is refused). Carried with every
   anchor: those of config.json, generation_config.json, tokenizer.json,
   tokenizer_config.json, special_tokens_map.json, vocab.json, vocab.txt,
   merges.txt, tokenizer.model, added_tokens.json, chat_template.jinja,
   chat_template.json and preprocessor_config.json that exist, the index,
   and what the `include` patterns match (fnmatch; never a shard, nor
   WSYNC_DIR_STEP_FILE). A refusal names the file, and the tensor or key.
   wsync_dir_publish publishes it as a step: a delta over all tensors
   (shards in name order, each in its file's order), or an anchor that
   keeps the layout (wsync_publisher_set_layout: one object per shard and
   carried file, each shard's __metadata__ kept).

   Following. PATH is a symbolic link switched by one rename from one
   complete version to the next: PATH.step_NNNNNN beside it (.K appended
   when the name is taken) holds the shards as the anchor at or before its
   step lays them out (the trainer's __metadata__ keys in order, "step"
   the version's: in its place, else appended), that anchor's files
   (checked against HEAD; hard links to the previous version's when equal)
   and WSYNC_DIR_STEP_FILE ({"step":N,"state":"<16 hex digits>"}, and
   "chain" after a sync given a verify key), all fsynced before the
   switch. A reader that resolves the link once (realpath) reads one whole
   step. The previous version stays (a reader may be in it); older ones and
   what killed runs left (PATH.step_*.tmp.PID, PATH.link.tmp.PID of dead
   processes, a version built but never linked) are removed. A version is
   written only for a step whose state digest is HEAD's (a chain without
   HEAD: unchecked, stats.unchecked), and only whole: a step whose anchor
   retention removed takes the previous version's files, or fails with
   PATH as it was. Runs on one PATH, in any processes, take turns on an
   flock of .PATH.wsync-lock beside it (created once, left there), held
   from reading the link to the switch and the pruning. PATH must not
   exist, or be a link wsync made: a directory of the caller's is refused
   (WSYNC_ERR_UNSUPPORTED), and a dangling link to a version beside it is
   rebuilt from the chain's anchor, never taken for a file. */
#define WSYNC_DIR_INDEX "model.safetensors.index.json"
#define WSYNC_DIR_STEP_FILE "wsync-step.json" /* reserved: each version's own */
#define WSYNC_DIR_FILE_MAX ((uint64_t)1 << 30)  /* a carried file's bytes, at most */
#define WSYNC_DIR_INDEX_MAX ((uint64_t)64 << 20) /* the index's bytes, at most */

#ifndef WSYNC_NO_ENCODE
/* A directory read for publishing (none with WSYNC_NO_ENCODE): the shards mapped (the tensors are views
   into the mappings, read-only, in publish order), the layout for
   wsync_publisher_set_layout and the carried files, mapped too. */
typedef struct wsync_dir_checkpoint {
    wsync_tensor *tensors;     /* every shard's, shard after shard */
    size_t n_tensors;
    wsync_anchor_shard *shards; /* named by file name; each its __metadata__ */
    size_t n_shards;
    wsync_anchor_file *files;  /* the carried files, by name */
    size_t n_files;
    uint64_t bytes;            /* the tensors' bytes */
    int has_step;              /* the step the directory claims: its shards' __metadata__
                                  "step" (all the same), else WSYNC_DIR_STEP_FILE's (a
                                  pulled version relayed) */
    uint64_t step;
    int skipped_step_file;     /* a pattern matched WSYNC_DIR_STEP_FILE: not carried */
    unsigned char *unmatched;  /* n_include flags: 1 where a pattern matched no file */
    void *priv;                /* private: the mappings and names */
} wsync_dir_checkpoint;
/* Reads and checks `dir` (the rules above); include: n_include fnmatch
   patterns of file names (no '/'). On failure nothing is held and err names
   the file and the rule. Free with wsync_dir_checkpoint_free. */
WSYNC_DEF wsync_result wsync_dir_read(const char *dir, const char *const *include, size_t n_include,
                                      wsync_dir_checkpoint *out, wsync_error *err);
WSYNC_DEF void wsync_dir_checkpoint_free(wsync_dir_checkpoint *c);
/* Publishes c as `step` (WSYNC_STEP_LATEST: the step c claims, has_step;
   else WSYNC_ERR_INVALID_ARGUMENT): wsync_publisher_set_layout with c's
   shards and files, then wsync_publish of its tensors. */
WSYNC_DEF wsync_result wsync_dir_publish(wsync_publisher *pub, uint64_t step, const wsync_dir_checkpoint *c,
                                         wsync_publish_stats *stats, wsync_error *err);
#endif /* WSYNC_NO_ENCODE */

/* What one sync of a directory did. */
typedef struct wsync_dir_sync_stats {
    wsync_sync_stats sync;     /* the subscriber's: path, bytes fetched, HEAD's step */
    int had_step;              /* PATH held a version before the sync: its step */
    uint64_t from_step;
    int has_step;              /* PATH holds a version now: its step */
    uint64_t step;
    int switched;              /* PATH now links to a version of another step: written
                                  by this sync (or, runs taking turns, by another run
                                  that reached the same step meanwhile) */
    char version[256];         /* the version PATH links to, a name beside it ("": none) */
    double write_s;            /* seconds writing it took */
    int unchecked;             /* switched with no state digest to check (no HEAD) */
    int write_failed;          /* the sync reached a step, and writing its version failed
                                  (err says why; PATH as it was) */
    int relayout;              /* the chain's tensors changed: rebuilt from anchor
                                  relayout_step's */
    uint64_t relayout_step;
} wsync_dir_sync_stats;

/* A follower of one directory PATH: the version PATH links to, held in
   memory between syncs (its bytes, once; a subscriber over them). opt as
   for wsync_subscriber_open (prefix, threads, spool_dir, verify_key,
   WSYNC_CHAIN_FOLLOW_RESTART; WSYNC_CHAIN_VERIFY_STATE is always on);
   WSYNC_CHAIN_NEW_CHAIN: with a verify key, the chain the version records
   is not pinned (follow a chain the trainer restarted with publish
   --new-chain). opt (its strings and keys) and the store must outlive the
   follower. open refuses a PATH wsync does not keep (WSYNC_ERR_UNSUPPORTED,
   naming it: a file, a directory of the caller's, a link to one, a
   dangling link to something else, a new name ending in .safetensors;
   wsync_dir_target tells a file's pull apart first) and loads the version
   PATH links to, if any; a PATH that does not exist yet is made at the
   first sync from the anchor it starts from.

   wsync_dir_follower_sync: one sync to `step` (WSYNC_STEP_LATEST: HEAD's),
   under the lock: the subscriber's path of deltas and anchors, then a new
   version and the switch when the step reached is another one, checks and
   is complete. On failure PATH links to what it linked to, or to the last
   step reached when that one checks (stats.switched), never a mixture. A
   HEAD older than the version held is WSYNC_ERR_STALE_HEAD, PATH kept
   (WSYNC_CHAIN_FOLLOW_RESTART: followed down). When the chain's tensors
   change (an anchor with new shapes) and the version held came from this
   chain, the model is rebuilt from the anchor (stats.relayout); a version
   of another model is WSYNC_ERR_LAYOUT, PATH left alone. A signed chain's
   refusal is WSYNC_ERR_SIGNATURE (or WSYNC_ERR_DIGEST_MISMATCH for an
   object), PATH kept. A follow loop calls it at each new HEAD.
   wsync_dir_follower_step: 1 and *step when the follower holds a step.
   wsync_dir_pull: open, one sync, close. A follower is used by one thread
   at a time; followers of one PATH, in any threads or processes, take
   turns on its lock. */
typedef struct wsync_dir_follower wsync_dir_follower;
WSYNC_DEF wsync_result wsync_dir_follower_open(const wsync_store *store, const wsync_chain_options *opt,
                                               const char *path, wsync_dir_follower **out, wsync_error *err);
WSYNC_DEF wsync_result wsync_dir_follower_sync(wsync_dir_follower *f, uint64_t step, wsync_dir_sync_stats *stats,
                                               wsync_error *err);
WSYNC_DEF int wsync_dir_follower_step(const wsync_dir_follower *f, uint64_t *step);
WSYNC_DEF void wsync_dir_follower_close(wsync_dir_follower *f);
WSYNC_DEF wsync_result wsync_dir_pull(const wsync_store *store, const wsync_chain_options *opt, const char *path,
                                      uint64_t step, wsync_dir_sync_stats *stats, wsync_error *err);
/* The tensors of a chain's anchor (an entry of wsync_chain_read's info) as
   one safetensors image, data zeroed, without the anchor's data: a
   directory anchor's shards (two ranged gets each for the header), the
   tensors in shard order; a file anchor's header. What targets are built
   from when nothing is held yet (a directory's chain pulled into one
   file). *image is allocated with WSYNC_MALLOC (free it with WSYNC_FREE:
   free()). */
WSYNC_DEF wsync_result wsync_dir_anchor_image(const wsync_store *store, const wsync_chain_options *opt,
                                              const wsync_chain_entry *anchor, uint8_t **image, uint64_t *size,
                                              wsync_error *err);
/* Whether a pull into `path` keeps a directory: *is_dir 1 when path is a
   link wsync made (or a dangling link to a version beside it), or does
   not exist, does not end in .safetensors and the chain's newest anchor at
   or before `limit` is a directory's; 0 for a file. A path a pull must
   leave alone (as wsync_dir_follower_open refuses it): *is_dir -1 and
   WSYNC_ERR_UNSUPPORTED; else the error reading the chain. */
WSYNC_DEF wsync_result wsync_dir_target(const char *path, const wsync_store *store, const wsync_chain_options *opt,
                                        uint64_t limit, int *is_dir, wsync_error *err);


/* ======================================================================
   Fabric: one-sided writes (the direct path's transport interface)  >>fabric
   ======================================================================
   A sender writes from its registered memory into a receiver's registered
   memory without the receiver's CPU taking part (RDMA WRITE, or its
   equivalents on one host and over TCP). The receiver registers a region
   and hands its descriptor to the sender over any control channel (the
   descriptor serialises to a fixed little-endian form); the sender opens
   it as a remote and writes at offsets. Backends (wsync_rdma.h): ibverbs
   RC, one-host (process_vm_writev or shared memory), TCP. Errors are
   results, never aborts. */

typedef enum wsync_mem_kind {
    WSYNC_MEM_HOST = 0,        /* ordinary process memory */
    WSYNC_MEM_CUDA = 1         /* device memory (dmabuf); no backend supports it yet */
} wsync_mem_kind;

#define WSYNC_FABRIC_DESC_MAX 200  /* backend bytes in a descriptor */
#define WSYNC_FABRIC_DESC_WIRE (4 + 4 + 4 + 4 + 8 + 8 + 4 + WSYNC_FABRIC_DESC_MAX)

/* What a peer needs to write into a registered region. */
typedef struct wsync_fabric_desc {
    uint32_t backend;          /* the backend's id (wsync_rdma.h: WSYNC_FABRIC_TCP, ...) */
    uint32_t kind;             /* wsync_mem_kind */
    uint32_t version;          /* the backend's descriptor version */
    uint32_t flags;            /* backend-defined */
    uint64_t addr, len;        /* the region in the owner's address space */
    uint32_t n_bytes;          /* used bytes of `bytes` */
    uint8_t bytes[WSYNC_FABRIC_DESC_MAX]; /* backend-specific: keys, pid, endpoint */
} wsync_fabric_desc;

/* Fixed little-endian wire form, WSYNC_FABRIC_DESC_WIRE bytes; decode checks
   every field (n_bytes in range, len nonzero, addr + len without overflow). */
WSYNC_DEF void wsync_fabric_desc_encode(const wsync_fabric_desc *d, uint8_t out[WSYNC_FABRIC_DESC_WIRE]);
WSYNC_DEF wsync_result wsync_fabric_desc_decode(const uint8_t *in, size_t len, wsync_fabric_desc *out,
                                                wsync_error *err);

typedef struct wsync_fabric_mr wsync_fabric_mr;         /* a local registration (opaque) */
typedef struct wsync_fabric_remote wsync_fabric_remote; /* a peer's region, opened (opaque) */

/* A backend: a table of functions plus its state, the cgltf way. */
typedef struct wsync_fabric {
    void *user;
    uint32_t backend;          /* the backend's id, as in its descriptors */
    /* Registers [addr, addr + len) for writes by peers (and as a source). */
    wsync_result (*reg)(void *user, void *addr, uint64_t len, wsync_mem_kind kind, wsync_fabric_mr **mr,
                        wsync_fabric_desc *desc, wsync_error *err);
    void (*dereg)(void *user, wsync_fabric_mr *mr);
    wsync_result (*open_remote)(void *user, const wsync_fabric_desc *desc, wsync_fabric_remote **out,
                                wsync_error *err);
    void (*close_remote)(void *user, wsync_fabric_remote *r);
    /* One-sided: len bytes from src (at src_off) to the remote at dst_off.
       May return before the bytes are visible; flush waits for them. */
    wsync_result (*write)(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                          uint64_t dst_off, uint64_t len, wsync_error *err);
    /* The same, then a 32-bit immediate delivered to the receiver after the
       bytes (NULL when the backend has none). */
    wsync_result (*write_imm)(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                              uint64_t dst_off, uint64_t len, uint32_t imm, wsync_error *err);
    /* Receiver: the next immediate that arrived on mr, waiting up to
       timeout_ms (WSYNC_ERR_LIMIT on timeout). */
    wsync_result (*recv_imm)(void *user, wsync_fabric_mr *mr, uint32_t *imm, int timeout_ms, wsync_error *err);
    /* Every write issued so far is visible at its target. */
    wsync_result (*flush)(void *user, wsync_error *err);
    void (*close)(void *user);
} wsync_fabric;

WSYNC_DEF void wsync_fabric_close(wsync_fabric *f);

#endif /* WSYNC_NO_CHAIN */

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_H */

/* ======================================================================
   ======================================================================
   IMPLEMENTATION
   ======================================================================
   ====================================================================== */
#if defined(WSYNC_IMPLEMENTATION) && !defined(WSYNC__IMPLEMENTED)
#define WSYNC__IMPLEMENTED

#include <stdarg.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if !defined(WSYNC_NO_THREADS) && (defined(__unix__) || defined(__APPLE__))
#define WSYNC__HAVE_THREADS 1
#include <pthread.h>
#else
#define WSYNC__HAVE_THREADS 0
#endif

#if defined(__unix__) || defined(__APPLE__)
#define WSYNC__POSIX 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>
#else
#define WSYNC__POSIX 0
#endif

#if !defined(WSYNC_NO_MMAP) && WSYNC__POSIX
#define WSYNC__HAVE_MMAP 1
#include <sys/mman.h>
#else
#define WSYNC__HAVE_MMAP 0
#endif

#if defined(WSYNC_MALLOC) && defined(WSYNC_FREE)
#elif !defined(WSYNC_MALLOC) && !defined(WSYNC_FREE)
#define WSYNC_MALLOC(sz) malloc(sz)
#define WSYNC_FREE(p) free(p)
#else
#error "Define both WSYNC_MALLOC and WSYNC_FREE, or neither."
#endif

#ifndef WSYNC_ASSERT
#include <assert.h>
#define WSYNC_ASSERT(x) assert(x)
#endif

/* ---------------------------------------------------------------------
   Base: platform: inlining, SIMD targets, bit helpers  >>platform
   --------------------------------------------------------------------- */

/* The one mutex wrapper (a pool, the memory store, a subscriber, a mirror
   lock their state with it): without threads it is nothing, and its
   argument, a mutex that then does not exist, is never evaluated. */
#if WSYNC__HAVE_THREADS
#define WSYNC__LOCK(mu) pthread_mutex_lock(mu)
#define WSYNC__UNLOCK(mu) pthread_mutex_unlock(mu)
#else
#define WSYNC__LOCK(mu) ((void)0)
#define WSYNC__UNLOCK(mu) ((void)0)
#endif

/* Small helpers are forced inline where the element width is a constant,
   so each width gets its own loop with the arithmetic folded. */
#if defined(__GNUC__)
#define WSYNC__INLINE static inline __attribute__((always_inline))
#define WSYNC__PREFETCH(p) __builtin_prefetch(p)
#else
#define WSYNC__INLINE static inline
#define WSYNC__PREFETCH(p) ((void)0)
#endif

#if !defined(WSYNC_NO_SIMD) && defined(__GNUC__) && defined(__x86_64__)
#define WSYNC__X86 1
#include <cpuid.h>
#include <immintrin.h>
#define WSYNC__AVX2 __attribute__((target("avx2")))
#define WSYNC__AVX512 __attribute__((target("avx512f,avx512bw")))
static int wsync__has_avx2(void) { return __builtin_cpu_supports("avx2"); }
/* BMI2 with a fast pdep: AMD's families before 0x19, and Hygon's, run
   pdep in microcode, far slower than the portable loop it replaces. */
static int wsync__pdep_fast(void)
{
    unsigned a, b, c, d, vendor, family;
    if (!__builtin_cpu_supports("bmi2") || !__get_cpuid(0, &a, &vendor, &c, &d)) return 0;
    if (vendor != 0x68747541u && vendor != 0x6F677948u) return 1; /* "Auth"enticAMD, "Hygo"nGenuine */
    if (vendor != 0x68747541u || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    family = (a >> 8) & 0xF;
    if (family == 0xF) family += (a >> 20) & 0xFF;
    return family >= 0x19;
}
static int wsync__has_avx512bw(void) { return __builtin_cpu_supports("avx512bw"); }
static int wsync__has_avx512vl(void) { return __builtin_cpu_supports("avx512vl"); }
/* The time-stamp counter: the clock of the run-time choice between SIMD
   paths (wsync__simd_measure), which compares paths' times in one process
   and needs no unit. Not serialising; the spans timed are microseconds. */
static uint64_t wsync__ticks(void) { return (uint64_t)__builtin_ia32_rdtsc(); }
#define WSYNC__AVX512VL_POPCNT __attribute__((target("avx512f,avx512bw,avx512vl,popcnt")))
#define WSYNC__AVX2_POPCNT __attribute__((target("avx2,popcnt")))
/* Helpers of the AVX2 loops: without always_inline, gcc -O2 (no -march)
   calls them out of line, passing vectors through memory, and the calls
   cost more than the work they do. */
#define WSYNC__AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline
#define WSYNC__AVX2_POPCNT_INLINE __attribute__((target("avx2,popcnt"), always_inline)) static inline
#define WSYNC__AVX512_POPCNT __attribute__((target("avx512f,avx512bw,popcnt")))
/* 64 bytes into a 512-bit register as two 256-bit loads. On an AMD EPYC of
   family 1Ah (Zen 5) a 512-bit load that crosses a cache line costs a
   stream far more than two 256-bit ones, and the data is seldom 64-aligned
   (malloc's large blocks sit 16 bytes into a page, a safetensors file's
   data often 8). Measured on that core, streaming
   512 MiB at offsets 8 and 16 (ratios to memcmp of the same bytes): the
   digest 0.43-0.61 with 512-bit loads, 0.75-0.82 with two 256-bit ones, as
   the AVX2 rounds; the 2-byte diff 0.67-0.79 against 0.79-0.84. Aligned,
   the two forms run alike. Inside AVX-512 functions only. (The zero-masked
   insert with every lane kept: GCC 12's plain one merges into an undefined
   vector, which its C++ mode at -O2 warns about; it compiles to the same
   unmasked vinserti64x4.) */
#define WSYNC__LOAD512(p)                                                                                            \
    _mm512_maskz_inserti64x4(0xFF, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(p))), \
                             _mm256_loadu_si256((const __m256i *)(const void *)((const uint8_t *)(p) + 32)), 1)
#else
#define WSYNC__X86 0
#endif
#if !defined(WSYNC_NO_SIMD) && defined(__ARM_NEON) && defined(__aarch64__)
#define WSYNC__NEON 1
#include <arm_neon.h>
#else
#define WSYNC__NEON 0
#endif

static uint64_t wsync__le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static unsigned wsync__ctz64(uint64_t v)
{
#if defined(__GNUC__)
    return (unsigned)__builtin_ctzll(v);
#else
    unsigned n = 0;
    while (!(v & 1)) v >>= 1, n++;
    return n;
#endif
}

/* A hint for the line `ahead` bytes past p, into L2 (prefetcht1 on x86),
   where the compiler has the builtin, else nothing. A prefetch never
   faults, so a line past the buffer's end is harmless; the address is formed
   as an integer so that no pointer points outside its object. */
#if defined(__GNUC__)
static inline __attribute__((always_inline)) void wsync__prefetch_l2(const void *p, size_t ahead)
{
    __builtin_prefetch((const void *)((uintptr_t)p + ahead), 0, 2);
}
#else
static void wsync__prefetch_l2(const void *p, size_t ahead)
{
    (void)p;
    (void)ahead;
}
#endif

/* The SIMD diffs' prefetch: the four lines a kilobyte ahead of a 256-byte
   window, in both inputs (the hardware prefetcher alone falls behind once
   the loop does work between loads). */
WSYNC__INLINE void wsync__prefetch_diff256(const uint8_t *a, const uint8_t *b)
{
    wsync__prefetch_l2(a, 1024);
    wsync__prefetch_l2(a, 1024 + 64);
    wsync__prefetch_l2(a, 1024 + 128);
    wsync__prefetch_l2(a, 1024 + 192);
    wsync__prefetch_l2(b, 1024);
    wsync__prefetch_l2(b, 1024 + 64);
    wsync__prefetch_l2(b, 1024 + 128);
    wsync__prefetch_l2(b, 1024 + 192);
}

#ifndef WSYNC_NO_ENCODE
/* Bits needed for v: 0 for 0, 64 for values with the top bit set. */
static unsigned wsync__bitlen64(uint64_t v)
{
#if defined(__GNUC__)
    return v ? 64 - (unsigned)__builtin_clzll(v) : 0;
#else
    unsigned n = 0;
    while (v) v >>= 1, n++;
    return n;
#endif
}
#endif /* WSYNC_NO_ENCODE */


WSYNC__INLINE unsigned wsync__popcount64(uint64_t v)
{
#if defined(__GNUC__) && defined(__POPCNT__)
    return (unsigned)__builtin_popcountll(v);
#else
    v = v - ((v >> 1) & 0x5555555555555555ull);
    v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
    v = (v + (v >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (unsigned)((v * 0x0101010101010101ull) >> 56);
#endif
}

/* The index of set bit k (from 0) of m; k < popcount(m). */
WSYNC__INLINE unsigned wsync__select64(uint64_t m, unsigned k)
{
#if defined(__GNUC__) && defined(__BMI2__) && WSYNC__X86
    return wsync__ctz64(_pdep_u64((uint64_t)1 << k, m));
#else
    while (k--) m &= m - 1;
    return wsync__ctz64(m);
#endif
}

/* ---------------------------------------------------------------------
   Base: results and errors  >>errors
   --------------------------------------------------------------------- */

WSYNC_DEF const char *wsync_result_str(wsync_result r)
{
    switch (r) {
#define WSYNC__RESULT_STR(name, value, text) \
    case name:                               \
        return text;
        WSYNC_RESULT_LIST(WSYNC__RESULT_STR)
#undef WSYNC__RESULT_STR
    default:
        return "unknown result";
    }
}

WSYNC_DEF const char *wsync_result_name(wsync_result r)
{
    switch (r) {
#define WSYNC__RESULT_NAME(name, value, text) \
    case name:                                \
        return #name;
        WSYNC_RESULT_LIST(WSYNC__RESULT_NAME)
#undef WSYNC__RESULT_NAME
    default:
        return "WSYNC_UNKNOWN_RESULT";
    }
}

static void wsync__error_reset(wsync_error *err)
{
    if (!err) return;
    err->code = WSYNC_OK;
    err->offset = UINT64_MAX;
    err->tensor[0] = 0;
    err->message[0] = 0;
}

/* Keeps a message's control characters (bytes below 0x20, DEL, and the C1
   controls U+0080..U+009F as UTF-8, 0xC2 0x80..0x9F) out of terminals and
   logs: each becomes '?'. Messages quote what servers and files say (keys
   from listings, error bodies, hrefs), and an escape sequence in one must
   not set a terminal's title or print fake lines. A URL's userinfo (basic
   authentication's password) becomes "***". */
WSYNC_DEF void wsync_error_clean(char *m)
{
    unsigned char *p = (unsigned char *)m;
    char *u;
    if (!m) return;
    for (; *p; p++) {
        if (*p < 0x20 || *p == 0x7F) *p = '?';
        else if (*p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F) p[0] = '?', p[1] = '?', p++;
    }
    /* a URL's userinfo (http://user:secret@host/) is a credential: "***" */
    for (u = strstr(m, "://"); u; u = strstr(u, "://")) {
        char *h = u + 3, *e = h, *at = NULL;
        while (*e && *e != '/' && *e != '?' && *e != '#' && *e != ' ' && *e != '\'' && *e != '"') {
            if (*e == '@') at = e;
            e++;
        }
        if (at && at - h > 3) {
            memcpy(h, "***", 3);
            memmove(h + 3, at, strlen(at) + 1);
            at = h + 3;
        } else if (at) {
            memset(h, '*', (size_t)(at - h));
        }
        u = at ? at : e;
    }
}

WSYNC_DEF wsync_result wsync_error_set(wsync_error *err, wsync_result code, const char *fmt, ...)
{
    va_list ap;
    if (!err) return code;
    err->code = code;
    err->offset = UINT64_MAX;
    err->tensor[0] = 0;
    err->message[0] = 0;
    if (fmt) {
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    wsync_error_clean(err->message);
    return code;
}

/* Copies a name for a message: stops at NUL, truncates long names with "...",
   and keeps control bytes out of terminals. */
static void wsync__name_copy(char *dst, size_t cap, const char *name, size_t len)
{
    size_t i, o = 0;
    for (i = 0; i < len && o + 1 < cap; i++) {
        unsigned char c = (unsigned char)name[i];
        dst[o++] = (char)(c < 0x20 || c == 0x7F ? '?' : c);
    }
    if (i < len && cap > 4) memcpy(dst + cap - 4, "...", 3), o = cap - 1;
    dst[o] = 0;
}

/* "BF16 [151936, 1024]" into buf (cut with "..." when long): a tensor's
   dtype and shape for messages; the shape from `shape`, or from `le`
   (little-endian u64s, as a packed stream holds them) when shape is NULL. */
static void wsync__shape_str(char *buf, size_t cap, wsync_dtype dtype, uint32_t rank, const uint64_t *shape,
                             const uint8_t *le)
{
    size_t n;
    uint32_t k;
    const char *dn = dtype > 0 && dtype < WSYNC_DTYPE_COUNT ? wsync_dtype_name(dtype) : "an unknown dtype";
    if (!cap) return;
    n = (size_t)snprintf(buf, cap, "%s [", dn);
    for (k = 0; k < rank && n < cap; k++) {
        uint64_t d = shape ? shape[k] : 0;
        if (!shape) {
            unsigned b;
            for (b = 0; b < 8; b++) d |= (uint64_t)le[8 * k + b] << (8 * b);
        }
        n += (size_t)snprintf(buf + n, cap - n, "%s%llu", k ? ", " : "", (unsigned long long)d);
    }
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "]");
    if (n >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
}

/* Fills `err` (when given) and returns `code`, so failures read
   `return wsync__fail(err, CODE, offset, name, len, "rule %d", x);`.
   `offset` UINT64_MAX and `name` NULL mean "not applicable". */
static wsync_result wsync__fail(wsync_error *err, wsync_result code, uint64_t offset,
                                const char *name, size_t name_len, const char *fmt, ...)
{
    char rule[256];
    va_list ap;
    size_t n = 0;
    if (!err) return code;
    err->code = code;
    err->offset = offset;
    err->tensor[0] = 0;
    if (name) wsync__name_copy(err->tensor, sizeof err->tensor, name, name_len);
    va_start(ap, fmt);
    vsnprintf(rule, sizeof rule, fmt, ap);
    va_end(ap);
    err->message[0] = 0;
    if (name) {
        n += (size_t)snprintf(err->message, sizeof err->message, "tensor '%s'", err->tensor);
    }
    if (offset != UINT64_MAX && n < sizeof err->message) {
        n += (size_t)snprintf(err->message + n, sizeof err->message - n, "%sat byte %llu",
                              n ? " " : "", (unsigned long long)offset);
    }
    if (n < sizeof err->message) {
        snprintf(err->message + n, sizeof err->message - n, "%s%s", n ? ": " : "", rule);
    }
    wsync_error_clean(err->message);
    return code;
}

/* ---------------------------------------------------------------------
   Base: allocator, overflow-checked sizes  >>alloc
   --------------------------------------------------------------------- */

static void *wsync__alloc(const wsync_allocator *a, size_t size)
{
    if (size == 0) size = 1;
    if (a && a->alloc) return a->alloc(a->user, size);
    return WSYNC_MALLOC(size);
}

static void wsync__free(const wsync_allocator *a, void *p)
{
    if (!p) return;
    if (a && a->free) {
        a->free(a->user, p);
        return;
    }
    WSYNC_FREE(p);
}

/* Each block of a pool starts with this header, padded to
   WSYNC__POOL_HDR bytes so that the caller's bytes keep malloc's
   alignment. */
typedef struct wsync__pool_blk {
    size_t cap; /* bytes after the header */
    struct wsync__pool_blk *next;
} wsync__pool_blk;
#define WSYNC__POOL_HDR 32

struct wsync_pool {
    wsync_allocator under;
    size_t keep, kept;
    wsync__pool_blk *blocks; /* kept for reuse */
#if WSYNC__HAVE_THREADS
    pthread_mutex_t mu;
#endif
};

/* The smallest kept block that holds size bytes and is at most twice as
   large (plus one minimum block), taken out of the list; NULL if none. */
static wsync__pool_blk *wsync__pool_take(wsync_pool *p, size_t size)
{
    wsync__pool_blk **at, **best = NULL, *b;
    size_t most = size > (SIZE_MAX - WSYNC_POOL_MIN_BLOCK) / 2 ? SIZE_MAX : 2 * size + WSYNC_POOL_MIN_BLOCK;
    WSYNC__LOCK(&p->mu);
    for (at = &p->blocks; *at; at = &(*at)->next)
        if ((*at)->cap >= size && (*at)->cap <= most && (!best || (*at)->cap < (*best)->cap)) best = at;
    b = best ? *best : NULL;
    if (b) {
        *best = b->next;
        p->kept -= b->cap;
    }
    WSYNC__UNLOCK(&p->mu);
    return b;
}

static void *wsync__pool_alloc(void *user, size_t size)
{
    wsync_pool *p = (wsync_pool *)user;
    wsync__pool_blk *b = NULL;
    size_t cap = size, total;
    if (size >= WSYNC_POOL_MIN_BLOCK) {
        if ((b = wsync__pool_take(p, size)) != NULL) return (uint8_t *)b + WSYNC__POOL_HDR;
        /* an eighth more, in whole pages, so that the next step's slightly
           larger request still fits this block */
        if (size <= (SIZE_MAX - 8192) / 9 * 8) cap = (size + size / 8 + 4095) & ~(size_t)4095;
    }
    if (!wsync_add_size(cap, WSYNC__POOL_HDR, &total)) return NULL;
    if (!(b = (wsync__pool_blk *)wsync__alloc(&p->under, total))) return NULL;
    b->cap = cap;
    return (uint8_t *)b + WSYNC__POOL_HDR;
}

static void wsync__pool_release(void *user, void *ptr)
{
    wsync_pool *p = (wsync_pool *)user;
    wsync__pool_blk *b;
    if (!ptr) return;
    b = (wsync__pool_blk *)(void *)((uint8_t *)ptr - WSYNC__POOL_HDR);
    if (b->cap >= WSYNC_POOL_MIN_BLOCK) {
        WSYNC__LOCK(&p->mu);
        if (b->cap <= p->keep - p->kept) {
            b->next = p->blocks;
            p->blocks = b;
            p->kept += b->cap;
            b = NULL;
        }
        WSYNC__UNLOCK(&p->mu);
    }
    if (b) wsync__free(&p->under, b);
}

WSYNC_DEF wsync_pool *wsync_pool_new(size_t keep_bytes, const wsync_allocator *under)
{
    wsync_allocator a;
    wsync_pool *p;
    memset(&a, 0, sizeof a);
    if (under) a = *under;
    if (!(p = (wsync_pool *)wsync__alloc(&a, sizeof *p))) return NULL;
    memset(p, 0, sizeof *p);
    p->under = a;
    p->keep = keep_bytes;
#if WSYNC__HAVE_THREADS
    pthread_mutex_init(&p->mu, NULL);
#endif
    return p;
}

#ifndef WSYNC_NO_CHAIN
/* What the pool of a publisher or a subscriber of tensors t[0..n) keeps:
   an eighth of the model (a delta's buffer, an apply's decoded changes),
   plus 16 MiB for the scratch whatever the model's size (the packed-max
   decoder's is about 3.5 MiB a thread). */
static size_t wsync__pool_keep(const wsync_tensor *t, size_t n)
{
    uint64_t bytes = 0;
    size_t i;
    for (i = 0; i < n; i++)
        if (!wsync_add_u64(bytes, t[i].nbytes, &bytes)) bytes = UINT64_MAX;
    bytes = bytes / 8 + ((uint64_t)16 << 20);
    return bytes > SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}
#endif /* WSYNC_NO_CHAIN */


WSYNC_DEF wsync_allocator wsync_pool_allocator(wsync_pool *p)
{
    wsync_allocator a;
    a.alloc = wsync__pool_alloc;
    a.free = wsync__pool_release;
    a.user = p;
    return a;
}

WSYNC_DEF size_t wsync_pool_kept(wsync_pool *p)
{
    size_t n;
    WSYNC__LOCK(&p->mu);
    n = p->kept;
    WSYNC__UNLOCK(&p->mu);
    return n;
}

WSYNC_DEF void wsync_pool_free(wsync_pool *p)
{
    wsync_allocator a;
    if (!p) return;
    while (p->blocks) {
        wsync__pool_blk *b = p->blocks;
        p->blocks = b->next;
        wsync__free(&p->under, b);
    }
#if WSYNC__HAVE_THREADS
    pthread_mutex_destroy(&p->mu);
#endif
    a = p->under;
    wsync__free(&a, p);
}

WSYNC_DEF int wsync_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

WSYNC_DEF int wsync_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}

WSYNC_DEF int wsync_mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

WSYNC_DEF int wsync_add_size(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}

static uint64_t wsync__load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void wsync__store_le64(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 8); /* one store: the bit writer's hot path (gcc -O2 keeps the loop below as eight) */
#else
    int i;
    for (i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
#endif
}

/* A hex digit's value (either case), -1 for anything else. */
static int wsync__hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* ---------------------------------------------------------------------
   Base: running work on worker threads  >>workers
   --------------------------------------------------------------------- */

/* Hands out indices 0..n-1 in order to `threads` workers calling
   fn(user, worker, index, err); stops handing out after a failure and
   reports the failure with the lowest index, so errors do not depend on
   timing. */
typedef wsync_result (*wsync__workers_fn)(void *user, unsigned worker, size_t index, wsync_error *err);

typedef struct wsync__workers {
    wsync__workers_fn fn;
    void *user;
    size_t n, next;
    int failed;
    size_t fail_index;
    wsync_result r;
    wsync_error err;
#if WSYNC__HAVE_THREADS
    pthread_mutex_t mu;
#endif
} wsync__workers;

typedef struct wsync__workers_arg {
    wsync__workers *workers;
    unsigned id;
} wsync__workers_arg;

static void *wsync__workers_run(void *arg)
{
    wsync__workers_arg *pw = (wsync__workers_arg *)arg;
    wsync__workers *p = pw->workers;
    for (;;) {
        size_t i;
        int stop;
        wsync_error e;
        wsync_result r;
#if WSYNC__HAVE_THREADS
        pthread_mutex_lock(&p->mu);
#endif
        i = p->next++;
        stop = p->failed;
#if WSYNC__HAVE_THREADS
        pthread_mutex_unlock(&p->mu);
#endif
        if (stop || i >= p->n) break;
        wsync__error_reset(&e);
        r = p->fn(p->user, pw->id, i, &e);
        if (r != WSYNC_OK) {
#if WSYNC__HAVE_THREADS
            pthread_mutex_lock(&p->mu);
#endif
            if (!p->failed || i < p->fail_index) {
                p->failed = 1;
                p->fail_index = i;
                p->r = r;
                p->err = e;
            }
#if WSYNC__HAVE_THREADS
            pthread_mutex_unlock(&p->mu);
#endif
        }
    }
    return NULL;
}

/* The worker threads for a request of asked (0: one): 1 to 16, 1 where
   there are no threads. */
static unsigned wsync__threads(unsigned asked)
{
#if WSYNC__HAVE_THREADS
    return asked < 1 ? 1 : asked > 16 ? 16 : asked;
#else
    (void)asked;
    return 1;
#endif
}

static wsync_result wsync__workers_do(unsigned threads, size_t n, wsync__workers_fn fn, void *user, wsync_error *err)
{
    wsync__workers p;
    wsync__workers_arg pw[16];
    unsigned t, started = 1;
    memset(&p, 0, sizeof p);
    p.fn = fn;
    p.user = user;
    p.n = n;
    p.r = WSYNC_OK;
    threads = wsync__threads(threads);
    if (threads > n) threads = n ? (unsigned)n : 1;
    for (t = 0; t < threads; t++) {
        pw[t].workers = &p;
        pw[t].id = t;
    }
#if WSYNC__HAVE_THREADS
    {
        pthread_t tid[16];
        pthread_mutex_init(&p.mu, NULL);
        for (t = 1; t < threads; t++) {
            if (pthread_create(&tid[t], NULL, wsync__workers_run, &pw[t]) != 0) break;
            started++;
        }
        wsync__workers_run(&pw[0]);
        for (t = 1; t < started; t++) pthread_join(tid[t], NULL);
        pthread_mutex_destroy(&p.mu);
    }
#else
    (void)started;
    wsync__workers_run(&pw[0]);
#endif
    if (p.failed && err) *err = p.err;
    return p.failed ? p.r : WSYNC_OK;
}

/* ---------------------------------------------------------------------
   Base: dtypes  >>dtypes
   --------------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned bits;
} wsync__dtypes[WSYNC_DTYPE_COUNT] = {
    {"INVALID", 0}, {"BOOL", 8},     {"U8", 8},       {"I8", 8},       {"F8_E4M3", 8},
    {"F8_E5M2", 8}, {"F8_E8M0", 8},  {"I16", 16},     {"U16", 16},     {"F16", 16},
    {"BF16", 16},   {"I32", 32},     {"U32", 32},     {"F32", 32},     {"F64", 64},
    {"I64", 64},    {"U64", 64},     {"C64", 64},     {"F4", 4},       {"F6_E2M3", 6},
    {"F6_E3M2", 6},
};

WSYNC_DEF const char *wsync_dtype_name(wsync_dtype t)
{
    if ((int)t <= 0 || (int)t >= WSYNC_DTYPE_COUNT) return "INVALID";
    return wsync__dtypes[t].name;
}

WSYNC_DEF wsync_dtype wsync_dtype_from_name(const char *name, size_t len)
{
    int i;
    if (!name) return WSYNC_DTYPE_INVALID;
    for (i = 1; i < WSYNC_DTYPE_COUNT; i++) {
        const char *n = wsync__dtypes[i].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return (wsync_dtype)i;
    }
    return WSYNC_DTYPE_INVALID;
}

WSYNC_DEF unsigned wsync_dtype_bits(wsync_dtype t)
{
    if ((int)t <= 0 || (int)t >= WSYNC_DTYPE_COUNT) return 0;
    return wsync__dtypes[t].bits;
}

WSYNC_DEF wsync_result wsync_dtype_nbytes(wsync_dtype t, uint64_t nelem, uint64_t *out)
{
    unsigned bits = wsync_dtype_bits(t);
    uint64_t total;
    if (bits == 0) return WSYNC_ERR_UNKNOWN_DTYPE;
    if (bits % 8 == 0) {
        if (!wsync_mul_u64(nelem, bits / 8, out)) return WSYNC_ERR_OVERFLOW;
        return WSYNC_OK;
    }
    if (!wsync_mul_u64(nelem, bits, &total)) return WSYNC_ERR_OVERFLOW;
    if (total % 8 != 0) return WSYNC_ERR_SIZE_MISMATCH;
    *out = total / 8;
    return WSYNC_OK;
}

/* ---------------------------------------------------------------------
   Base: numeric conversions  >>convert
   --------------------------------------------------------------------- */

static uint32_t wsync__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float wsync__bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

WSYNC_DEF uint16_t wsync_f32_to_bf16(float f)
{
    uint32_t u = wsync__f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    /* Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even;
       a carry into the exponent is exactly the right result (up to infinity). */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

WSYNC_DEF float wsync_bf16_to_f32(uint16_t h)
{
    return wsync__bits_f32((uint32_t)h << 16);
}

/* Rounds m (a magnitude with an implicit leading bit) right by `shift` bits,
   to nearest, ties to even. shift is 1..63. */
static uint32_t wsync__rne_shift(uint64_t m, unsigned shift)
{
    uint64_t r, rem, half;
    if (shift >= 64) return 0;
    r = m >> shift;
    rem = m & ((((uint64_t)1) << shift) - 1);
    half = ((uint64_t)1) << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint32_t)r;
}

WSYNC_DEF uint16_t wsync_f32_to_f16(float f)
{
    uint32_t u = wsync__f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu, e;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                    /* below 2^-14: subnormal */
        e = a >> 23;
        if (e < 102) return sign; /* below 2^-25, half the smallest subnormal */
        return (uint16_t)(sign | wsync__rne_shift((a & 0x7FFFFFu) | 0x800000u, 126 - e));
    }
    a -= 0x38000000u; /* rebias 127 -> 15 */
    a += 0xFFFu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

WSYNC_DEF float wsync_f16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1Fu, m = (uint32_t)h & 0x3FFu;
    if (e == 0x1F) return wsync__bits_f32(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        if (m == 0) return wsync__bits_f32(sign);
        e = 113;
        while (!(m & 0x400u)) m <<= 1, e--;
        return wsync__bits_f32(sign | (e << 23) | ((m & 0x3FFu) << 13));
    }
    return wsync__bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* The magnitude code of a finite, non-NaN |x| (bits `a`) in a small float
   format with `mbits` mantissa bits and exponent bias `bias`, rounded to
   nearest even. The code may exceed the format's largest finite one; the
   caller decides what overflow means. */
static uint32_t wsync__fp8_code(uint32_t a, unsigned mbits, unsigned bias)
{
    uint32_t e = a >> 23;
    unsigned drop = 23 - mbits;
    if (e >= 127 + 1 - bias) { /* normal in the small format */
        a -= (127 - bias) << 23;
        a += ((1u << (drop - 1)) - 1) + ((a >> drop) & 1u);
        return a >> drop;
    }
    /* Subnormal: units of 2^(1 - bias - mbits). */
    if (e == 0) return 0; /* f32 subnormals are far below any fp8 subnormal */
    return wsync__rne_shift((a & 0x7FFFFFu) | 0x800000u, 150 + 1 - bias - mbits - e);
}

/* f in a small float format (mbits, bias as above): NaN as 0x7F (a NaN in
   both formats), an infinity and a magnitude whose code passes max (the
   largest finite one) as over. */
static uint8_t wsync__f32_to_fp8(float f, unsigned mbits, unsigned bias, uint32_t max, uint8_t over)
{
    uint32_t u = wsync__f32_bits(f), a = u & 0x7FFFFFFFu, code;
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7F800000u) return (uint8_t)(sign | 0x7F);
    if (a == 0x7F800000u) return (uint8_t)(sign | over);
    code = wsync__fp8_code(a, mbits, bias);
    if (code > max) return (uint8_t)(sign | over);
    return (uint8_t)(sign | code);
}

WSYNC_DEF uint8_t wsync_f32_to_e4m3(float f, wsync_fp8_mode mode)
{
    return wsync__f32_to_fp8(f, 3, 7, 0x7E, mode == WSYNC_FP8_TORCH ? 0x7F : 0x7E); /* torch: NaN (no infinity) */
}

WSYNC_DEF float wsync_e4m3_to_f32(uint8_t v)
{
    uint32_t sign = ((uint32_t)v & 0x80u) << 24, e = ((uint32_t)v >> 3) & 0xFu, m = v & 7u;
    if ((v & 0x7F) == 0x7F) return wsync__bits_f32(sign | 0x7FC00000u);
    if (e == 0) {
        float f = (float)m * 0.001953125f; /* m * 2^-9, exact */
        return sign ? -f : f;
    }
    return wsync__bits_f32(sign | ((e + 120) << 23) | (m << 20));
}

WSYNC_DEF uint8_t wsync_f32_to_e5m2(float f, wsync_fp8_mode mode)
{
    return wsync__f32_to_fp8(f, 2, 15, 0x7B, mode == WSYNC_FP8_TORCH ? 0x7C : 0x7B); /* torch: infinity */
}

WSYNC_DEF float wsync_e5m2_to_f32(uint8_t v)
{
    uint32_t sign = ((uint32_t)v & 0x80u) << 24, e = ((uint32_t)v >> 2) & 0x1Fu, m = v & 3u;
    if (e == 0x1F) return wsync__bits_f32(sign | 0x7F800000u | (m << 21) | (m ? 0x400000u : 0));
    if (e == 0) {
        float f = (float)m * 1.52587890625e-05f; /* m * 2^-16, exact */
        return sign ? -f : f;
    }
    return wsync__bits_f32(sign | ((e + 112) << 23) | (m << 21));
}

WSYNC_DEF void wsync_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) dst[i] = wsync_f32_to_bf16(src[i]);
}

WSYNC_DEF void wsync_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) dst[i] = wsync_bf16_to_f32(src[i]);
}

WSYNC_DEF void wsync_f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) dst[i] = wsync_f32_to_f16(src[i]);
}

WSYNC_DEF void wsync_f16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) dst[i] = wsync_f16_to_f32(src[i]);
}

WSYNC_DEF void wsync_f32_to_e4m3_n(const float *src, uint8_t *dst, size_t n, wsync_fp8_mode mode)
{
    size_t i;
    for (i = 0; i < n; i++) dst[i] = wsync_f32_to_e4m3(src[i], mode);
}

WSYNC_DEF void wsync_e4m3_to_f32_n(const uint8_t *src, float *dst, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) dst[i] = wsync_e4m3_to_f32(src[i]);
}

WSYNC_DEF void wsync_f32_to_e5m2_n(const float *src, uint8_t *dst, size_t n, wsync_fp8_mode mode)
{
    size_t i;
    for (i = 0; i < n; i++) dst[i] = wsync_f32_to_e5m2(src[i], mode);
}

WSYNC_DEF void wsync_e5m2_to_f32_n(const uint8_t *src, float *dst, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) dst[i] = wsync_e5m2_to_f32(src[i]);
}

/* ---------------------------------------------------------------------
   Base: files  >>files
   --------------------------------------------------------------------- */

enum { WSYNC__MAP_EMPTY = 0, WSYNC__MAP_MMAP = 1, WSYNC__MAP_HEAP = 2 };

static const uint8_t wsync__empty[1] = {0};

#if !WSYNC__HAVE_MMAP
static wsync_result wsync__read_file(const char *path, wsync_mapped *m, wsync_error *err)
{
    FILE *f = fopen(path, "rb");
    long len;
    uint8_t *buf;
    if (!f) return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot open '%s': %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot size '%s'", path);
    }
    if (len == 0) {
        fclose(f);
        m->bytes = wsync__empty;
        return WSYNC_OK;
    }
    buf = (uint8_t *)wsync__alloc(&m->allocator, (size_t)len);
    if (!buf) {
        fclose(f);
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0,
                           "cannot hold '%s' (%ld bytes) in memory", path, len);
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        wsync__free(&m->allocator, buf);
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "short read on '%s'", path);
    }
    fclose(f);
    m->bytes = buf;
    m->base = buf;
    m->size = (uint64_t)len;
    m->kind = WSYNC__MAP_HEAP;
    return WSYNC_OK;
}
#endif

WSYNC_DEF wsync_result wsync_file_map(const char *path, wsync_mapped *out, wsync_error *err)
{
    wsync__error_reset(err);
    if (!out || !path)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           "wsync_file_map needs a path and an output");
    memset(out, 0, sizeof *out);
    out->bytes = wsync__empty;
#if WSYNC__HAVE_MMAP
    {
        struct stat st;
        void *p;
        /* O_NONBLOCK: a FIFO given as a file is refused, not waited on */
        int fd = open(path, O_RDONLY | O_NONBLOCK);
        if (fd < 0)
            return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot open '%s': %s", path, strerror(errno));
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0,
                               "'%s' is not a regular file (a directory, a FIFO or a device)", path);
        }
        if (st.st_size == 0) {
            close(fd);
            return WSYNC_OK;
        }
        if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
            close(fd);
            return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0,
                               "'%s' is larger than the address space", path);
        }
        p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
            return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot map '%s'", path);
        out->bytes = (const uint8_t *)p;
        out->base = p;
        out->size = (uint64_t)st.st_size;
        out->kind = WSYNC__MAP_MMAP;
        return WSYNC_OK;
    }
#else
    return wsync__read_file(path, out, err);
#endif
}

WSYNC_DEF void wsync_file_unmap(wsync_mapped *m)
{
    if (!m) return;
#if WSYNC__HAVE_MMAP
    if (m->kind == WSYNC__MAP_MMAP) munmap(m->base, (size_t)m->size);
#endif
    if (m->kind == WSYNC__MAP_HEAP) wsync__free(&m->allocator, m->base);
    memset(m, 0, sizeof *m);
    m->bytes = wsync__empty;
}

/* ======================================================================
   Base: hashes and signatures  >>crypto
   ======================================================================
   SHA-256 and SHA-512 as FIPS 180-4 gives them, BLAKE2b as RFC 7693, and
   Ed25519 as RFC 8032 over a field of sixteen 16-bit limbs (each held in
   a 64-bit word, so that products and their sums need no 128-bit type).
   Speed: verify and sign are a few milliseconds each (one or two scalar
   multiplications), paid once per HEAD; the hashes run over every object
   of a signed chain (BENCHMARKS.md, "Signed chains"). */

static uint32_t wsync__ror32(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static uint64_t wsync__ror64(uint64_t x, unsigned n)
{
    return (x >> n) | (x << (64 - n));
}

static uint64_t wsync__load_be64(const uint8_t *p)
{
    uint64_t v = 0;
    int i;
    for (i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static void wsync__store_be64(uint8_t *p, uint64_t v)
{
    int i;
    for (i = 7; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

/* SHA-256 and SHA-512 but for their block size bs (64, 128) and block
   function: whole blocks go to block straight from the data, the rest
   waits in buf (nbuf bytes so far). */
typedef void (*wsync__sha2_block_fn)(void *h, const uint8_t *p);

static void wsync__sha2_update(void *h, uint8_t *buf, size_t *nbuf, size_t bs, wsync__sha2_block_fn block,
                               const uint8_t *p, size_t len)
{
    if (!len) return;
    if (*nbuf) {
        size_t take = bs - *nbuf < len ? bs - *nbuf : len;
        memcpy(buf + *nbuf, p, take);
        *nbuf += take, p += take, len -= take;
        if (*nbuf < bs) return;
        block(h, buf);
        *nbuf = 0;
    }
    for (; len >= bs; p += bs, len -= bs) block(h, p);
    if (len) memcpy(buf, p, len), *nbuf = len;
}

/* The end of a message of len bytes (FIPS 180-4, 5.1): 0x80, zeros, and
   the length in bits in a block's last bs / 8 bytes, run through block
   (on a copy of the state: final leaves it as it was). */
static void wsync__sha2_pad(void *h, uint8_t *buf, size_t nbuf, uint64_t len, size_t bs, wsync__sha2_block_fn block)
{
    uint8_t pad[144];
    size_t lenbytes = bs / 8;
    size_t padlen = (nbuf < bs - lenbytes ? bs - lenbytes : 2 * bs - lenbytes) - nbuf; /* 1..bs: the 0x80 and zeros */
    memset(pad, 0, sizeof pad);
    pad[0] = 0x80;
    if (lenbytes == 16) wsync__store_be64(pad + padlen, len >> 61), padlen += 8; /* the high half of 128 bits */
    wsync__store_be64(pad + padlen, len << 3);
    wsync__sha2_update(h, buf, &nbuf, bs, block, pad, padlen + 8);
}

/* ---- SHA-256 ---- */

static const uint32_t wsync__sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

static void wsync__sha256_block(void *state, const uint8_t *p)
{
    uint32_t *h = (uint32_t *)state;
    uint32_t w[64], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    int i;
    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = wsync__ror32(w[i - 15], 7) ^ wsync__ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = wsync__ror32(w[i - 2], 17) ^ wsync__ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    for (i = 0; i < 64; i++) {
        uint32_t t1 = k + (wsync__ror32(e, 6) ^ wsync__ror32(e, 11) ^ wsync__ror32(e, 25)) + ((e & f) ^ (~e & g)) +
                      wsync__sha256_k[i] + w[i];
        uint32_t t2 = (wsync__ror32(a, 2) ^ wsync__ror32(a, 13) ^ wsync__ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

WSYNC_DEF void wsync_sha256_init(wsync_sha256_state *s)
{
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->nbuf = 0;
}

WSYNC_DEF void wsync_sha256_update(wsync_sha256_state *s, const void *data, size_t len)
{
    s->len += len;
    wsync__sha2_update(s->h, s->buf, &s->nbuf, 64, wsync__sha256_block, (const uint8_t *)data, len);
}

WSYNC_DEF void wsync_sha256_final(const wsync_sha256_state *s, uint8_t out[32])
{
    wsync_sha256_state c = *s;
    int i;
    wsync__sha2_pad(c.h, c.buf, c.nbuf, c.len, 64, wsync__sha256_block);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c.h[i] >> 24), out[4 * i + 1] = (uint8_t)(c.h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c.h[i] >> 8), out[4 * i + 3] = (uint8_t)c.h[i];
    }
}

WSYNC_DEF void wsync_sha256(const void *data, size_t len, uint8_t out[32])
{
    wsync_sha256_state s;
    wsync_sha256_init(&s);
    wsync_sha256_update(&s, data, len);
    wsync_sha256_final(&s, out);
}

/* ---- HMAC-SHA256, constant-time compare, random bytes ---- */

WSYNC_DEF void wsync_hmac_sha256_init(wsync_hmac_sha256_state *s, const void *key, size_t key_len)
{
    uint8_t k[64], pad[64];
    size_t i;
    memset(k, 0, sizeof k);
    if (key_len > 64) wsync_sha256(key, key_len, k);
    else if (key_len) memcpy(k, key, key_len);
    for (i = 0; i < 64; i++) pad[i] = (uint8_t)(k[i] ^ 0x36);
    wsync_sha256_init(&s->inner);
    wsync_sha256_update(&s->inner, pad, 64);
    for (i = 0; i < 64; i++) pad[i] = (uint8_t)(k[i] ^ 0x5c);
    wsync_sha256_init(&s->outer);
    wsync_sha256_update(&s->outer, pad, 64);
    memset(k, 0, sizeof k);
    memset(pad, 0, sizeof pad);
}

WSYNC_DEF void wsync_hmac_sha256_update(wsync_hmac_sha256_state *s, const void *data, size_t len)
{
    wsync_sha256_update(&s->inner, data, len);
}

WSYNC_DEF void wsync_hmac_sha256_final(const wsync_hmac_sha256_state *s, uint8_t out[32])
{
    wsync_sha256_state o = s->outer;
    uint8_t ih[32];
    wsync_sha256_final(&s->inner, ih);
    wsync_sha256_update(&o, ih, 32);
    wsync_sha256_final(&o, out);
}

WSYNC_DEF void wsync_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t len, uint8_t out[32])
{
    wsync_hmac_sha256_state s;
    wsync_hmac_sha256_init(&s, key, key_len);
    wsync_hmac_sha256_update(&s, msg, len);
    wsync_hmac_sha256_final(&s, out);
}

WSYNC_DEF int wsync_ct_equal(const void *a, const void *b, size_t n)
{
    const volatile uint8_t *x = (const volatile uint8_t *)a, *y = (const volatile uint8_t *)b;
    uint8_t d = 0;
    size_t i;
    for (i = 0; i < n; i++) d = (uint8_t)(d | (x[i] ^ y[i]));
    return d == 0;
}

WSYNC_DEF wsync_result wsync_random_bytes(void *out, size_t n)
{
#if WSYNC__POSIX
    uint8_t *p = (uint8_t *)out;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0) return WSYNC_ERR_IO;
    while (n) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) { close(fd); return WSYNC_ERR_IO; }
        p += got, n -= (size_t)got;
    }
    close(fd);
    return WSYNC_OK;
#else
    (void)out, (void)n;
    return WSYNC_ERR_IO;
#endif
}

/* ---- key files ---- */

#define WSYNC__KEY_SECRET "wsync ed25519 secret "
#define WSYNC__KEY_PUBLIC "wsync ed25519 public "

/* Reads a key file's line: the prefix `want`, 64 hex digits, optional
   trailing white space; the other kind's prefix is named in the error. */
static wsync_result wsync__key_read(const char *path, int secret, uint8_t out[32], wsync_error *err)
{
#if WSYNC__POSIX
    const char *want = secret ? WSYNC__KEY_SECRET : WSYNC__KEY_PUBLIC;
    const char *other = secret ? WSYNC__KEY_PUBLIC : WSYNC__KEY_SECRET;
    size_t wl = strlen(want), i, n = 0;
    char buf[160];
    struct stat st;
    int fd;
    if (!path || !*path) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "no key file named");
    fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot open key file '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "key file '%s' is not a regular file", path);
    }
    if (secret && (st.st_mode & 077)) {
        close(fd);
        return wsync__fail(err, WSYNC_ERR_AUTH, UINT64_MAX, NULL, 0,
                           "secret key file '%s' may be read or written by other users (mode %04o): chmod 600 it",
                           path, (unsigned)(st.st_mode & 07777));
    }
    while (n < sizeof buf) {
        ssize_t got = read(fd, buf + n, sizeof buf - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot read key file '%s': %s", path, strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (n == sizeof buf)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "key file '%s' is longer than a key (%zu bytes or more)", path, sizeof buf);
    if (n >= wl && memcmp(buf, other, wl) == 0)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           secret ? "'%s' is a public key file; signing needs the secret key (NAME.key)"
                                  : "'%s' is a secret key file; verifying needs the public key (NAME.pub), and the secret key should not leave the trainer",
                           path);
    if (n < wl + 64 || memcmp(buf, want, wl) != 0)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           "key file '%s' does not hold a line \"%s<64 hex digits>\" (wsync keygen writes them)", path, want);
    for (i = 0; i < 64; i++) {
        int v = wsync__hexval(buf[wl + i]);
        if (v < 0)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, (uint64_t)(wl + i), NULL, 0,
                               "key file '%s': byte %zu is not a hex digit", path, wl + i);
        if (i % 2 == 0) out[i / 2] = (uint8_t)(v << 4);
        else out[i / 2] = (uint8_t)(out[i / 2] | v);
    }
    for (i = wl + 64; i < n; i++)
        if (buf[i] != '\n' && buf[i] != '\r' && buf[i] != ' ' && buf[i] != '\t')
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, (uint64_t)i, NULL, 0,
                               "key file '%s': more than one key (byte %zu follows the 64 hex digits)", path, i);
    return WSYNC_OK;
#else
    (void)secret, (void)out;
    return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "key files need a POSIX system ('%s')", path ? path : "");
#endif
}

WSYNC_DEF wsync_result wsync_key_read_secret(const char *path, uint8_t sec[64], wsync_error *err)
{
    uint8_t seed[32], pub[32];
    wsync_result r = wsync__key_read(path, 1, seed, err);
    if (r == WSYNC_OK) wsync_ed25519_keypair(seed, pub, sec);
    memset(seed, 0, sizeof seed);
    return r;
}

WSYNC_DEF wsync_result wsync_key_read_public(const char *path, uint8_t pub[32], wsync_error *err)
{
    return wsync__key_read(path, 0, pub, err);
}

#if WSYNC__POSIX
static int wsync__key_write(const char *path, const char *prefix, const uint8_t k[32], int mode)
{
    static const char hex[] = "0123456789abcdef";
    char line[128];
    size_t n = strlen(prefix), i, off = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0) return -1;
    memcpy(line, prefix, n);
    for (i = 0; i < 32; i++) line[n++] = hex[k[i] >> 4], line[n++] = hex[k[i] & 15];
    line[n++] = '\n';
    while (off < n) {
        ssize_t w = write(fd, line + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    memset(line, 0, sizeof line);
    if (off < n || fsync(fd) != 0) {
        int e = errno ? errno : EIO;
        close(fd);
        unlink(path);
        errno = e;
        return -1;
    }
    return close(fd);
}
#endif

WSYNC_DEF wsync_result wsync_keygen(const char *name, wsync_error *err)
{
#if WSYNC__POSIX
    char kp[4096], pp[4096];
    uint8_t seed[32], pub[32], sec[64];
    struct stat st;
    wsync_result r;
    if (!name || !*name) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "keygen: no name given");
    if (strlen(name) + 5 > sizeof kp) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "keygen: name too long");
    snprintf(kp, sizeof kp, "%s.key", name);
    snprintf(pp, sizeof pp, "%s.pub", name);
    if (stat(kp, &st) == 0 || stat(pp, &st) == 0)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           "keygen: '%s' already exists; a key is never replaced (remove it first, or choose another name)",
                           stat(kp, &st) == 0 ? kp : pp);
    r = wsync_random_bytes(seed, sizeof seed);
    if (r != WSYNC_OK) return wsync__fail(err, r, UINT64_MAX, NULL, 0, "keygen: the system has no random source (/dev/urandom)");
    wsync_ed25519_keypair(seed, pub, sec);
    if (wsync__key_write(kp, WSYNC__KEY_SECRET, seed, 0600) != 0) {
        memset(seed, 0, sizeof seed), memset(sec, 0, sizeof sec);
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "keygen: cannot write '%s': %s", kp, strerror(errno));
    }
    memset(seed, 0, sizeof seed), memset(sec, 0, sizeof sec);
    if (wsync__key_write(pp, WSYNC__KEY_PUBLIC, pub, 0644) != 0) {
        int e = errno;
        unlink(kp);
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "keygen: cannot write '%s': %s (nothing kept)", pp, strerror(e));
    }
    return WSYNC_OK;
#else
    return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "keygen needs a POSIX system ('%s')", name ? name : "");
#endif
}

/* ---- SHA-512 (its initial values are BLAKE2b's too) ---- */

static const uint64_t wsync__sha512_iv[8] = {
    0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull, 0xa54ff53a5f1d36f1ull,
    0x510e527fade682d1ull, 0x9b05688c2b3e6c1full, 0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull};

static const uint64_t wsync__sha512_k[80] = {
    0x428a2f98d728ae22ull, 0x7137449123ef65cdull, 0xb5c0fbcfec4d3b2full, 0xe9b5dba58189dbbcull,
    0x3956c25bf348b538ull, 0x59f111f1b605d019ull, 0x923f82a4af194f9bull, 0xab1c5ed5da6d8118ull,
    0xd807aa98a3030242ull, 0x12835b0145706fbeull, 0x243185be4ee4b28cull, 0x550c7dc3d5ffb4e2ull,
    0x72be5d74f27b896full, 0x80deb1fe3b1696b1ull, 0x9bdc06a725c71235ull, 0xc19bf174cf692694ull,
    0xe49b69c19ef14ad2ull, 0xefbe4786384f25e3ull, 0x0fc19dc68b8cd5b5ull, 0x240ca1cc77ac9c65ull,
    0x2de92c6f592b0275ull, 0x4a7484aa6ea6e483ull, 0x5cb0a9dcbd41fbd4ull, 0x76f988da831153b5ull,
    0x983e5152ee66dfabull, 0xa831c66d2db43210ull, 0xb00327c898fb213full, 0xbf597fc7beef0ee4ull,
    0xc6e00bf33da88fc2ull, 0xd5a79147930aa725ull, 0x06ca6351e003826full, 0x142929670a0e6e70ull,
    0x27b70a8546d22ffcull, 0x2e1b21385c26c926ull, 0x4d2c6dfc5ac42aedull, 0x53380d139d95b3dfull,
    0x650a73548baf63deull, 0x766a0abb3c77b2a8ull, 0x81c2c92e47edaee6ull, 0x92722c851482353bull,
    0xa2bfe8a14cf10364ull, 0xa81a664bbc423001ull, 0xc24b8b70d0f89791ull, 0xc76c51a30654be30ull,
    0xd192e819d6ef5218ull, 0xd69906245565a910ull, 0xf40e35855771202aull, 0x106aa07032bbd1b8ull,
    0x19a4c116b8d2d0c8ull, 0x1e376c085141ab53ull, 0x2748774cdf8eeb99ull, 0x34b0bcb5e19b48a8ull,
    0x391c0cb3c5c95a63ull, 0x4ed8aa4ae3418acbull, 0x5b9cca4f7763e373ull, 0x682e6ff3d6b2b8a3ull,
    0x748f82ee5defb2fcull, 0x78a5636f43172f60ull, 0x84c87814a1f0ab72ull, 0x8cc702081a6439ecull,
    0x90befffa23631e28ull, 0xa4506cebde82bde9ull, 0xbef9a3f7b2c67915ull, 0xc67178f2e372532bull,
    0xca273eceea26619cull, 0xd186b8c721c0c207ull, 0xeada7dd6cde0eb1eull, 0xf57d4f7fee6ed178ull,
    0x06f067aa72176fbaull, 0x0a637dc5a2c898a6ull, 0x113f9804bef90daeull, 0x1b710b35131c471bull,
    0x28db77f523047d84ull, 0x32caab7b40c72493ull, 0x3c9ebe0a15c9bebcull, 0x431d67c49c100d4cull,
    0x4cc5d4becb3e42b6ull, 0x597f299cfc657e2aull, 0x5fcb6fab3ad6faecull, 0x6c44198c4a475817ull};

static void wsync__sha512_block(void *state, const uint8_t *p)
{
    uint64_t *h = (uint64_t *)state;
    uint64_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    int i;
    for (i = 0; i < 16; i++) w[i] = wsync__load_be64(p + 8 * i);
    for (i = 16; i < 80; i++) {
        uint64_t s0 = wsync__ror64(w[i - 15], 1) ^ wsync__ror64(w[i - 15], 8) ^ (w[i - 15] >> 7);
        uint64_t s1 = wsync__ror64(w[i - 2], 19) ^ wsync__ror64(w[i - 2], 61) ^ (w[i - 2] >> 6);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    for (i = 0; i < 80; i++) {
        uint64_t t1 = k + (wsync__ror64(e, 14) ^ wsync__ror64(e, 18) ^ wsync__ror64(e, 41)) + ((e & f) ^ (~e & g)) +
                      wsync__sha512_k[i] + w[i];
        uint64_t t2 = (wsync__ror64(a, 28) ^ wsync__ror64(a, 34) ^ wsync__ror64(a, 39)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

WSYNC_DEF void wsync_sha512_init(wsync_sha512_state *s)
{
    memcpy(s->h, wsync__sha512_iv, sizeof s->h);
    s->len = 0;
    s->nbuf = 0;
}

WSYNC_DEF void wsync_sha512_update(wsync_sha512_state *s, const void *data, size_t len)
{
    s->len += len;
    wsync__sha2_update(s->h, s->buf, &s->nbuf, 128, wsync__sha512_block, (const uint8_t *)data, len);
}

WSYNC_DEF void wsync_sha512_final(const wsync_sha512_state *s, uint8_t out[64])
{
    wsync_sha512_state c = *s;
    int i;
    wsync__sha2_pad(c.h, c.buf, c.nbuf, c.len, 128, wsync__sha512_block);
    for (i = 0; i < 8; i++) wsync__store_be64(out + 8 * i, c.h[i]);
}

WSYNC_DEF void wsync_sha512(const void *data, size_t len, uint8_t out[64])
{
    wsync_sha512_state s;
    wsync_sha512_init(&s);
    wsync_sha512_update(&s, data, len);
    wsync_sha512_final(&s, out);
}

/* ---- BLAKE2b ---- */


#define WSYNC__B2B_G(a, b, c, d, x, y)                                                                                 \
    do {                                                                                                               \
        v[a] = v[a] + v[b] + (x), v[d] = wsync__ror64(v[d] ^ v[a], 32);                                               \
        v[c] = v[c] + v[d], v[b] = wsync__ror64(v[b] ^ v[c], 24);                                                     \
        v[a] = v[a] + v[b] + (y), v[d] = wsync__ror64(v[d] ^ v[a], 16);                                               \
        v[c] = v[c] + v[d], v[b] = wsync__ror64(v[b] ^ v[c], 63);                                                     \
    } while (0)

static void wsync__b2b_compress(wsync_blake2b_state *s, const uint8_t *block, int last)
{
    uint64_t m[16], v[16];
    int i;
    for (i = 0; i < 16; i++) m[i] = wsync__load_le64(block + 8 * i);
    for (i = 0; i < 8; i++) v[i] = s->h[i], v[i + 8] = wsync__sha512_iv[i];
    v[12] ^= s->t[0];
    v[13] ^= s->t[1];
    if (last) v[14] = ~v[14];
    /* The rounds written out, every message index a constant; v stays in
       registers and each message word is read from m where it is used
       (volatile): with all 32 words live, gcc 12 tuned for Zen with
       AVX-512 (-march=native on a Zen 4) spilled them into vector
       registers, a vmovq each way, at a third of the speed. */
#define WSYNC__B2B_M(k) (*(volatile const uint64_t *)&m[k])
#define WSYNC__B2B_ROUND(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15) \
    do {                                                                                       \
        WSYNC__B2B_G(0, 4, 8, 12, WSYNC__B2B_M(s0), WSYNC__B2B_M(s1));                         \
        WSYNC__B2B_G(1, 5, 9, 13, WSYNC__B2B_M(s2), WSYNC__B2B_M(s3));                         \
        WSYNC__B2B_G(2, 6, 10, 14, WSYNC__B2B_M(s4), WSYNC__B2B_M(s5));                        \
        WSYNC__B2B_G(3, 7, 11, 15, WSYNC__B2B_M(s6), WSYNC__B2B_M(s7));                        \
        WSYNC__B2B_G(0, 5, 10, 15, WSYNC__B2B_M(s8), WSYNC__B2B_M(s9));                        \
        WSYNC__B2B_G(1, 6, 11, 12, WSYNC__B2B_M(s10), WSYNC__B2B_M(s11));                      \
        WSYNC__B2B_G(2, 7, 8, 13, WSYNC__B2B_M(s12), WSYNC__B2B_M(s13));                       \
        WSYNC__B2B_G(3, 4, 9, 14, WSYNC__B2B_M(s14), WSYNC__B2B_M(s15));                       \
    } while (0)
    WSYNC__B2B_ROUND(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    WSYNC__B2B_ROUND(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
    WSYNC__B2B_ROUND(11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4);
    WSYNC__B2B_ROUND(7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8);
    WSYNC__B2B_ROUND(9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13);
    WSYNC__B2B_ROUND(2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9);
    WSYNC__B2B_ROUND(12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11);
    WSYNC__B2B_ROUND(13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10);
    WSYNC__B2B_ROUND(6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5);
    WSYNC__B2B_ROUND(10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0);
    WSYNC__B2B_ROUND(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    WSYNC__B2B_ROUND(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
#undef WSYNC__B2B_ROUND
#undef WSYNC__B2B_M
    for (i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}
#undef WSYNC__B2B_G

static void wsync__b2b_count(wsync_blake2b_state *s, uint64_t n)
{
    s->t[0] += n;
    if (s->t[0] < n) s->t[1]++;
}

#if WSYNC__X86
/* The same compression with the state's four rows in four AVX2 registers:
   G on the four columns at once, then on the diagonals (rows b, c, d
   rotated by one, two and three lanes first, back after). The rotations
   by 32, 24 and 16 are shuffles, by 63 a shift and an add. 1.5-2x the
   portable code (BENCHMARKS.md, "Signed chains"). */
#define WSYNC__B2B_G4(x, y)                                                                                  \
    do {                                                                                                     \
        a = _mm256_add_epi64(_mm256_add_epi64(a, b), x);                                                     \
        d = _mm256_shuffle_epi32(_mm256_xor_si256(d, a), _MM_SHUFFLE(2, 3, 0, 1));                          \
        c = _mm256_add_epi64(c, d);                                                                          \
        b = _mm256_shuffle_epi8(_mm256_xor_si256(b, c), r24);                                                \
        a = _mm256_add_epi64(_mm256_add_epi64(a, b), y);                                                     \
        d = _mm256_shuffle_epi8(_mm256_xor_si256(d, a), r16);                                                \
        c = _mm256_add_epi64(c, d);                                                                          \
        b = _mm256_xor_si256(b, c);                                                                          \
        b = _mm256_or_si256(_mm256_srli_epi64(b, 63), _mm256_add_epi64(b, b));                               \
    } while (0)
#define WSYNC__B2B_M4(i, j, k, l) _mm256_set_epi64x((long long)m[l], (long long)m[k], (long long)m[j], (long long)m[i])
#define WSYNC__B2B_ROUND4(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)             \
    do {                                                                                                     \
        WSYNC__B2B_G4(WSYNC__B2B_M4(s0, s2, s4, s6), WSYNC__B2B_M4(s1, s3, s5, s7));                         \
        b = _mm256_permute4x64_epi64(b, _MM_SHUFFLE(0, 3, 2, 1));                                            \
        c = _mm256_permute4x64_epi64(c, _MM_SHUFFLE(1, 0, 3, 2));                                            \
        d = _mm256_permute4x64_epi64(d, _MM_SHUFFLE(2, 1, 0, 3));                                            \
        WSYNC__B2B_G4(WSYNC__B2B_M4(s8, s10, s12, s14), WSYNC__B2B_M4(s9, s11, s13, s15));                   \
        b = _mm256_permute4x64_epi64(b, _MM_SHUFFLE(2, 1, 0, 3));                                            \
        c = _mm256_permute4x64_epi64(c, _MM_SHUFFLE(1, 0, 3, 2));                                            \
        d = _mm256_permute4x64_epi64(d, _MM_SHUFFLE(0, 3, 2, 1));                                            \
    } while (0)

/* n blocks from p, the counter raised by inc before each, the last one
   flagged final when `last`. */
WSYNC__AVX2 static void wsync__b2b_blocks_avx2(wsync_blake2b_state *s, const uint8_t *p, size_t n, uint64_t inc,
                                              int last)
{
    const __m256i r16 = _mm256_setr_epi8(2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9, 2, 3, 4, 5, 6, 7, 0, 1,
                                         10, 11, 12, 13, 14, 15, 8, 9);
    const __m256i r24 = _mm256_setr_epi8(3, 4, 5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10, 3, 4, 5, 6, 7, 0, 1, 2,
                                         11, 12, 13, 14, 15, 8, 9, 10);
    const __m256i iv0 = _mm256_loadu_si256((const __m256i *)(const void *)wsync__sha512_iv);
    const __m256i iv1 = _mm256_loadu_si256((const __m256i *)(const void *)(wsync__sha512_iv + 4));
    __m256i h0 = _mm256_loadu_si256((const __m256i *)(void *)s->h);
    __m256i h1 = _mm256_loadu_si256((const __m256i *)(void *)(s->h + 4));
    size_t i;
    for (i = 0; i < n; i++, p += 128) {
        uint64_t m[16];
        __m256i a, b, c, d;
        memcpy(m, p, sizeof m); /* x86: little-endian */
        wsync__b2b_count(s, inc);
        a = h0, b = h1, c = iv0;
        d = _mm256_xor_si256(iv1, _mm256_set_epi64x(0, last && i + 1 == n ? -1 : 0, (long long)s->t[1],
                                                     (long long)s->t[0]));
        WSYNC__B2B_ROUND4(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        WSYNC__B2B_ROUND4(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
        WSYNC__B2B_ROUND4(11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4);
        WSYNC__B2B_ROUND4(7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8);
        WSYNC__B2B_ROUND4(9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13);
        WSYNC__B2B_ROUND4(2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9);
        WSYNC__B2B_ROUND4(12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11);
        WSYNC__B2B_ROUND4(13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10);
        WSYNC__B2B_ROUND4(6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5);
        WSYNC__B2B_ROUND4(10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0);
        WSYNC__B2B_ROUND4(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        WSYNC__B2B_ROUND4(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
        h0 = _mm256_xor_si256(h0, _mm256_xor_si256(a, c));
        h1 = _mm256_xor_si256(h1, _mm256_xor_si256(b, d));
    }
    _mm256_storeu_si256((__m256i *)(void *)s->h, h0);
    _mm256_storeu_si256((__m256i *)(void *)(s->h + 4), h1);
}
#undef WSYNC__B2B_ROUND4
#undef WSYNC__B2B_M4
#undef WSYNC__B2B_G4
#endif

/* n blocks by the state's path (impl: 0 the CPU's widest, else SCALAR or
   AVX2 as wsync_blake2b_using asked), as wsync__b2b_blocks_avx2. */
static void wsync__b2b_blocks(wsync_blake2b_state *s, const uint8_t *p, size_t n, uint64_t inc, int last)
{
    size_t i;
#if WSYNC__X86
    if (s->impl == WSYNC_IMPL_AVX2 || (s->impl == WSYNC_IMPL_AUTO && wsync__has_avx2())) {
        wsync__b2b_blocks_avx2(s, p, n, inc, last);
        return;
    }
#endif
    for (i = 0; i < n; i++, p += 128) {
        wsync__b2b_count(s, inc);
        wsync__b2b_compress(s, p, last && i + 1 == n);
    }
}

static void wsync__b2b_init(wsync_blake2b_state *s, size_t outlen, wsync_impl impl)
{
    if (outlen < 1 || outlen > WSYNC_BLAKE2B_MAX) outlen = WSYNC_BLAKE2B_MAX;
    memcpy(s->h, wsync__sha512_iv, sizeof s->h);
    s->h[0] ^= 0x01010000u ^ (uint64_t)outlen; /* no key, fanout 1, depth 1 */
    s->t[0] = s->t[1] = 0;
    s->nbuf = 0;
    s->outlen = outlen;
    s->impl = (int)impl;
}

WSYNC_DEF void wsync_blake2b_init(wsync_blake2b_state *s, size_t outlen)
{
    wsync__b2b_init(s, outlen, WSYNC_IMPL_AUTO);
}

/* The last block is compressed by final (with its flag): a full buffer
   waits until more bytes arrive. */
WSYNC_DEF void wsync_blake2b_update(wsync_blake2b_state *s, const void *data, size_t len)
{
    const uint8_t *p = (const uint8_t *)data;
    while (len) {
        size_t take;
        if (s->nbuf == 128) {
            wsync__b2b_blocks(s, s->buf, 1, 128, 0);
            s->nbuf = 0;
        }
        if (!s->nbuf && len > 128) {
            size_t n = (len - 1) / 128; /* at least one byte stays for the last block */
            wsync__b2b_blocks(s, p, n, 128, 0);
            p += n * 128, len -= n * 128;
        }
        take = 128 - s->nbuf < len ? 128 - s->nbuf : len;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take, p += take, len -= take;
    }
}

WSYNC_DEF void wsync_blake2b_final(const wsync_blake2b_state *s, uint8_t *out)
{
    wsync_blake2b_state c = *s;
    uint8_t h[64];
    int i;
    memset(c.buf + c.nbuf, 0, 128 - c.nbuf);
    wsync__b2b_blocks(&c, c.buf, 1, c.nbuf, 1);
    for (i = 0; i < 8; i++) wsync__store_le64(h + 8 * i, c.h[i]);
    memcpy(out, h, c.outlen);
}

WSYNC_DEF void wsync_blake2b_using(wsync_impl impl, const void *data, size_t len, uint8_t *out, size_t outlen, int *ok)
{
    wsync_blake2b_state s;
    int have = impl == WSYNC_IMPL_AUTO || impl == WSYNC_IMPL_SCALAR;
#if WSYNC__X86
    have |= impl == WSYNC_IMPL_AVX2 && wsync__has_avx2();
#endif
    if (ok) *ok = have;
    if (!have) return;
    wsync__b2b_init(&s, outlen, impl);
    wsync_blake2b_update(&s, data, len);
    wsync_blake2b_final(&s, out);
}

WSYNC_DEF void wsync_blake2b(const void *data, size_t len, uint8_t *out, size_t outlen)
{
    wsync_blake2b_state s;
    wsync_blake2b_init(&s, outlen);
    wsync_blake2b_update(&s, data, len);
    wsync_blake2b_final(&s, out);
}

/* ---- Ed25519: the field GF(2^255 - 19) ----
   An element is sixteen limbs of 16 bits, little-endian, each in a 64-bit
   word: products of two limbs and their sums stay far below 2^64, and
   every limb stays non-negative (a difference adds 8p first). Every
   result is carried: limbs 1..15 at most 0xffff and limb 0 below 2^17,
   which is what add, sub and mul each take. */

typedef uint64_t wsync__fe[16];

static const uint64_t wsync__fe_p[16] = {0xffed, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff,
                                         0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0x7fff};

/* One pass: each limb's bits above 16 go to the next; the top limb's to
   limb 0 times 38 (2^256 = 38 mod p). */
static void wsync__fe_carry(wsync__fe o)
{
    int i;
    for (i = 0; i < 16; i++) {
        uint64_t c = o[i] >> 16;
        o[i] &= 0xffff;
        if (i < 15) o[i + 1] += c;
        else o[0] += 38 * c;
    }
}

static void wsync__fe_set(wsync__fe o, uint64_t v) /* v < 2^16 */
{
    memset(o, 0, sizeof(wsync__fe));
    o[0] = v;
}

static void wsync__fe_copy(wsync__fe o, const wsync__fe a)
{
    memcpy(o, a, sizeof(wsync__fe));
}

static void wsync__fe_add(wsync__fe o, const wsync__fe a, const wsync__fe b)
{
    int i;
    for (i = 0; i < 16; i++) o[i] = a[i] + b[i];
    wsync__fe_carry(o);
}

static void wsync__fe_sub(wsync__fe o, const wsync__fe a, const wsync__fe b)
{
    int i;
    for (i = 0; i < 16; i++) o[i] = a[i] + 8 * wsync__fe_p[i] - b[i];
    wsync__fe_carry(o);
}

static void wsync__fe_mul(wsync__fe o, const wsync__fe a, const wsync__fe b)
{
    uint64_t t[31];
    int i, j;
    memset(t, 0, sizeof t);
    for (i = 0; i < 16; i++)
        for (j = 0; j < 16; j++) t[i + j] += a[i] * b[j];
    for (i = 0; i < 15; i++) t[i] += 38 * t[i + 16];
    memcpy(o, t, sizeof(wsync__fe));
    wsync__fe_carry(o);
    wsync__fe_carry(o);
}

static void wsync__fe_sq(wsync__fe o, const wsync__fe a)
{
    wsync__fe_mul(o, a, a);
}

/* o = a if flag else o, without a branch on flag (0 or 1). */
static void wsync__fe_cmov(wsync__fe o, const wsync__fe a, uint64_t flag)
{
    uint64_t m = (uint64_t)0 - flag;
    int i;
    for (i = 0; i < 16; i++) o[i] ^= m & (o[i] ^ a[i]);
}

/* The canonical 32 bytes: fully carried, then p taken away while it fits
   (twice at most: the value is below 2^256 = 2p + 38), without branches. */
static void wsync__fe_pack(uint8_t out[32], const wsync__fe a)
{
    uint64_t t[16], m[16];
    int i, pass;
    memcpy(t, a, sizeof t);
    wsync__fe_carry(t);
    wsync__fe_carry(t);
    wsync__fe_carry(t);
    for (pass = 0; pass < 2; pass++) {
        uint64_t borrow = 0, keep;
        for (i = 0; i < 16; i++) {
            uint64_t v = t[i] - wsync__fe_p[i] - borrow;
            m[i] = v & 0xffff;
            borrow = (v >> 16) & 1;
        }
        keep = (uint64_t)0 - borrow; /* a borrow: t was below p, keep it */
        for (i = 0; i < 16; i++) t[i] = (t[i] & keep) | (m[i] & ~keep);
    }
    for (i = 0; i < 16; i++) out[2 * i] = (uint8_t)t[i], out[2 * i + 1] = (uint8_t)(t[i] >> 8);
}

/* The low 255 bits of 32 bytes (the top bit is a point's sign of x). */
static void wsync__fe_unpack(wsync__fe o, const uint8_t in[32])
{
    int i;
    for (i = 0; i < 16; i++) o[i] = (uint64_t)in[2 * i] | (uint64_t)in[2 * i + 1] << 8;
    o[15] &= 0x7fff;
}

static int wsync__fe_eq(const wsync__fe a, const wsync__fe b)
{
    uint8_t x[32], y[32];
    wsync__fe_pack(x, a);
    wsync__fe_pack(y, b);
    return memcmp(x, y, 32) == 0;
}

static int wsync__fe_parity(const wsync__fe a)
{
    uint8_t x[32];
    wsync__fe_pack(x, a);
    return x[0] & 1;
}

/* a^e for e = 2^n - 1 - (the sum of 2^i over the bits i listed as zero):
   square and multiply from the top bit (n-1) down. */
static void wsync__fe_pow_ones(wsync__fe o, const wsync__fe a, int n, int zero1, int zero2)
{
    wsync__fe c;
    int i;
    wsync__fe_copy(c, a);
    for (i = n - 2; i >= 0; i--) {
        wsync__fe_sq(c, c);
        if (i != zero1 && i != zero2) wsync__fe_mul(c, c, a);
    }
    wsync__fe_copy(o, c);
}

/* 1/a = a^(p-2), p - 2 = 2^255 - 21: bits 2 and 4 are its zeros. */
static void wsync__fe_inv(wsync__fe o, const wsync__fe a)
{
    wsync__fe_pow_ones(o, a, 255, 2, 4);
}

/* a^((p-5)/8), (p - 5)/8 = 2^252 - 3: bit 1 is its zero. */
static void wsync__fe_pow2523(wsync__fe o, const wsync__fe a)
{
    wsync__fe_pow_ones(o, a, 252, 1, 1);
}

/* ---- Ed25519: points ----
   Extended coordinates (X:Y:Z:T), x = X/Z, y = Y/Z, xy = T/Z, on
   -x^2 + y^2 = 1 + d x^2 y^2. One addition formula for every pair, a
   point with itself included (complete: d is not a square). */

typedef struct wsync__ge {
    wsync__fe x, y, z, t;
} wsync__ge;

/* The curve's constants, computed rather than typed in: d = -121665/121666,
   2d, sqrt(-1) = 2^((p-1)/4), and B, decoded from its encoding (y = 4/5,
   x even). About a fifth of one scalar multiplication. */
typedef struct wsync__edc {
    wsync__fe d, d2, sqrtm1;
    wsync__ge b;
} wsync__edc;

static void wsync__ge_identity(wsync__ge *p)
{
    wsync__fe_set(p->x, 0);
    wsync__fe_set(p->y, 1);
    wsync__fe_set(p->z, 1);
    wsync__fe_set(p->t, 0);
}

static void wsync__ge_add(const wsync__edc *k, wsync__ge *r, const wsync__ge *p, const wsync__ge *q)
{
    wsync__fe a, b, c, d, e, f, g, h, t;
    wsync__fe_sub(a, p->y, p->x);
    wsync__fe_sub(t, q->y, q->x);
    wsync__fe_mul(a, a, t);
    wsync__fe_add(b, p->y, p->x);
    wsync__fe_add(t, q->y, q->x);
    wsync__fe_mul(b, b, t);
    wsync__fe_mul(c, p->t, q->t);
    wsync__fe_mul(c, c, k->d2);
    wsync__fe_mul(d, p->z, q->z);
    wsync__fe_add(d, d, d);
    wsync__fe_sub(e, b, a);
    wsync__fe_sub(f, d, c);
    wsync__fe_add(g, d, c);
    wsync__fe_add(h, b, a);
    wsync__fe_mul(r->x, e, f);
    wsync__fe_mul(r->y, g, h);
    wsync__fe_mul(r->t, e, h);
    wsync__fe_mul(r->z, f, g);
}

static void wsync__ge_cmov(wsync__ge *r, const wsync__ge *p, uint64_t flag)
{
    wsync__fe_cmov(r->x, p->x, flag);
    wsync__fe_cmov(r->y, p->y, flag);
    wsync__fe_cmov(r->z, p->z, flag);
    wsync__fe_cmov(r->t, p->t, flag);
}

/* r = [s]p, s 32 bytes little-endian: a double and an add for every bit,
   the sum kept or not by a mask, so the time does not depend on s. */
static void wsync__ge_scalarmult(const wsync__edc *k, wsync__ge *r, const wsync__ge *p, const uint8_t s[32])
{
    wsync__ge acc, sum;
    int i;
    wsync__ge_identity(&acc);
    for (i = 255; i >= 0; i--) {
        uint64_t bit = (uint64_t)(s[i >> 3] >> (i & 7)) & 1;
        wsync__ge_add(k, &acc, &acc, &acc);
        wsync__ge_add(k, &sum, &acc, p);
        wsync__ge_cmov(&acc, &sum, bit);
    }
    *r = acc;
}

static void wsync__ge_pack(uint8_t out[32], const wsync__ge *p)
{
    wsync__fe zi, x, y;
    wsync__fe_inv(zi, p->z);
    wsync__fe_mul(x, p->x, zi);
    wsync__fe_mul(y, p->y, zi);
    wsync__fe_pack(out, y);
    out[31] ^= (uint8_t)(wsync__fe_parity(x) << 7);
}

/* RFC 8032 5.1.3, strictly: y below p (the canonical encoding), x
   recovered from y, refused where there is none, and x = 0 with the sign
   bit set refused. 1 on success. */
static int wsync__ge_unpack(const wsync__edc *k, wsync__ge *p, const uint8_t in[32])
{
    wsync__fe u, v, v3, x, t, one;
    uint8_t canon[32];
    int sign = in[31] >> 7;
    wsync__fe_unpack(p->y, in);
    wsync__fe_pack(canon, p->y);
    canon[31] |= (uint8_t)(sign << 7);
    if (memcmp(canon, in, 32) != 0) return 0; /* y >= p */
    wsync__fe_set(one, 1);
    wsync__fe_sq(u, p->y);
    wsync__fe_mul(v, u, k->d);
    wsync__fe_sub(u, u, one); /* u = y^2 - 1 */
    wsync__fe_add(v, v, one); /* v = d y^2 + 1 */
    /* x = u v^3 (u v^7)^((p-5)/8) */
    wsync__fe_sq(v3, v);
    wsync__fe_mul(v3, v3, v);
    wsync__fe_sq(x, v3);
    wsync__fe_mul(x, x, v);
    wsync__fe_mul(x, x, u);
    wsync__fe_pow2523(x, x);
    wsync__fe_mul(x, x, v3);
    wsync__fe_mul(x, x, u);
    /* v x^2 is u, or -u (then x times sqrt(-1)), or x has no value */
    wsync__fe_sq(t, x);
    wsync__fe_mul(t, t, v);
    if (!wsync__fe_eq(t, u)) {
        wsync__fe_add(t, t, u);
        wsync__fe_set(one, 0);
        if (!wsync__fe_eq(t, one)) return 0;
        wsync__fe_mul(x, x, k->sqrtm1);
    }
    wsync__fe_set(one, 0);
    if (wsync__fe_eq(x, one) && sign) return 0;
    if (wsync__fe_parity(x) != sign) wsync__fe_sub(x, one, x);
    wsync__fe_copy(p->x, x);
    wsync__fe_set(p->z, 1);
    wsync__fe_mul(p->t, x, p->y);
    return 1;
}

static void wsync__edc_init(wsync__edc *k)
{
    static const uint8_t base[32] = {0x58, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
                                     0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
                                     0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66};
    wsync__fe a, zero;
    int ok;
    wsync__fe_set(a, 121666);
    wsync__fe_inv(a, a);
    wsync__fe_set(k->d, 121665);
    wsync__fe_mul(k->d, k->d, a);
    wsync__fe_set(zero, 0);
    wsync__fe_sub(k->d, zero, k->d);
    wsync__fe_add(k->d2, k->d, k->d);
    wsync__fe_set(a, 2);
    wsync__fe_pow_ones(k->sqrtm1, a, 253, 2, 2); /* (p-1)/4 = 2^253 - 5 */
    ok = wsync__ge_unpack(k, &k->b, base);
    WSYNC_ASSERT(ok);
    (void)ok;
}

/* 1 when [8]p is the identity (p of small order: a forged key's trick). */
static int wsync__ge_small_order(const wsync__edc *k, const wsync__ge *p)
{
    wsync__ge q = *p;
    wsync__fe zero;
    int i;
    for (i = 0; i < 3; i++) wsync__ge_add(k, &q, &q, &q);
    wsync__fe_set(zero, 0);
    return wsync__fe_eq(q.x, zero);
}

/* ---- Ed25519: scalars modulo L = 2^252 + 27742317777372353535851937790883648493 ---- */

static const uint64_t wsync__ed_l[4] = {0x5812631a5cf5d3edull, 0x14def9dea2f79cd6ull, 0, 0x1000000000000000ull};

/* out = in mod L, in 64 bytes little-endian: a bit at a time from the
   top, r = 2r + bit, L taken away when it fits (without a branch). */
static void wsync__sc_reduce(uint8_t out[32], const uint8_t in[64])
{
    uint64_t r[4] = {0, 0, 0, 0}, t[4];
    int i, j;
    for (i = 511; i >= 0; i--) {
        uint64_t borrow = 0, keep;
        r[3] = r[3] << 1 | r[2] >> 63;
        r[2] = r[2] << 1 | r[1] >> 63;
        r[1] = r[1] << 1 | r[0] >> 63;
        r[0] = r[0] << 1 | ((uint64_t)(in[i >> 3] >> (i & 7)) & 1);
        for (j = 0; j < 4; j++) {
            uint64_t d = r[j] - wsync__ed_l[j];
            uint64_t b2 = (r[j] < wsync__ed_l[j]) | (d < borrow);
            t[j] = d - borrow;
            borrow = b2;
        }
        keep = (uint64_t)0 - borrow; /* r < L: keep r */
        for (j = 0; j < 4; j++) r[j] = (r[j] & keep) | (t[j] & ~keep);
    }
    for (j = 0; j < 4; j++) wsync__store_le64(out + 8 * j, r[j]);
}

/* out = (a * b + c) mod L; a, b, c 32 bytes each (a product below 2^512). */
static void wsync__sc_muladd(uint8_t out[32], const uint8_t a[32], const uint8_t b[32], const uint8_t c[32])
{
    uint32_t x[8], y[8], z[16];
    uint8_t wide[64];
    uint64_t carry;
    int i, j;
    for (i = 0; i < 8; i++) {
        x[i] = (uint32_t)a[4 * i] | (uint32_t)a[4 * i + 1] << 8 | (uint32_t)a[4 * i + 2] << 16 | (uint32_t)a[4 * i + 3] << 24;
        y[i] = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
    }
    memset(z, 0, sizeof z);
    for (i = 0; i < 16; i++)
        z[i] = i < 8 ? (uint32_t)c[4 * i] | (uint32_t)c[4 * i + 1] << 8 | (uint32_t)c[4 * i + 2] << 16 |
                           (uint32_t)c[4 * i + 3] << 24
                     : 0;
    for (i = 0; i < 8; i++) {
        carry = 0;
        for (j = 0; j < 8; j++) {
            uint64_t v = (uint64_t)x[i] * y[j] + z[i + j] + carry;
            z[i + j] = (uint32_t)v;
            carry = v >> 32;
        }
        for (j = i + 8; j < 16 && carry; j++) {
            uint64_t v = (uint64_t)z[j] + carry;
            z[j] = (uint32_t)v;
            carry = v >> 32;
        }
    }
    for (i = 0; i < 16; i++)
        wide[4 * i] = (uint8_t)z[i], wide[4 * i + 1] = (uint8_t)(z[i] >> 8), wide[4 * i + 2] = (uint8_t)(z[i] >> 16),
                  wide[4 * i + 3] = (uint8_t)(z[i] >> 24);
    wsync__sc_reduce(out, wide);
}

/* 1 when s (32 bytes little-endian) is below L. */
static int wsync__sc_canonical(const uint8_t s[32])
{
    int j;
    for (j = 3; j >= 0; j--) {
        uint64_t v = wsync__load_le64(s + 8 * j);
        if (v != wsync__ed_l[j]) return v < wsync__ed_l[j];
    }
    return 0;
}

/* ---- Ed25519: keys, signatures ---- */

/* The secret scalar a (clamped) and the nonce prefix from a seed. */
static void wsync__ed_expand(const uint8_t seed[32], uint8_t a[32], uint8_t prefix[32])
{
    uint8_t h[64];
    wsync_sha512(seed, 32, h);
    h[0] &= 248;
    h[31] &= 127;
    h[31] |= 64;
    memcpy(a, h, 32);
    if (prefix) memcpy(prefix, h + 32, 32);
}

/* k = SHA-512(R || A || msg) mod L, R and A encoded points (32 bytes each):
   the hash that signing and verifying both take. */
static void wsync__ed_challenge(uint8_t k[32], const uint8_t *R, const uint8_t *A, const void *msg, size_t len)
{
    wsync_sha512_state hs;
    uint8_t h[64];
    wsync_sha512_init(&hs);
    wsync_sha512_update(&hs, R, 32);
    wsync_sha512_update(&hs, A, 32);
    wsync_sha512_update(&hs, msg, len);
    wsync_sha512_final(&hs, h);
    wsync__sc_reduce(k, h);
}

WSYNC_DEF void wsync_ed25519_keypair(const uint8_t seed[32], uint8_t pub[32], uint8_t sec[64])
{
    wsync__edc k;
    wsync__ge A;
    uint8_t a[32], p[32];
    wsync__edc_init(&k);
    wsync__ed_expand(seed, a, NULL);
    wsync__ge_scalarmult(&k, &A, &k.b, a);
    wsync__ge_pack(p, &A);
    if (sec) memcpy(sec, seed, 32), memcpy(sec + 32, p, 32);
    if (pub) memcpy(pub, p, 32);
}

WSYNC_DEF void wsync_ed25519_sign(const uint8_t sec[64], const void *msg, size_t len, uint8_t sig[64])
{
    wsync__edc k;
    wsync__ge P;
    wsync_sha512_state hs;
    uint8_t a[32], prefix[32], pub[32], h[64], r[32], hk[32];
    wsync__edc_init(&k);
    wsync__ed_expand(sec, a, prefix);
    wsync__ge_scalarmult(&k, &P, &k.b, a);
    wsync__ge_pack(pub, &P); /* from the seed, not sec + 32 */
    /* r = SHA-512(prefix || msg) mod L; R = [r]B */
    wsync_sha512_init(&hs);
    wsync_sha512_update(&hs, prefix, 32);
    wsync_sha512_update(&hs, msg, len);
    wsync_sha512_final(&hs, h);
    wsync__sc_reduce(r, h);
    wsync__ge_scalarmult(&k, &P, &k.b, r);
    wsync__ge_pack(sig, &P);
    /* S = r + k a mod L, k the challenge */
    wsync__ed_challenge(hk, sig, pub, msg, len);
    wsync__sc_muladd(sig + 32, hk, a, r);
    memset(a, 0, sizeof a);
    memset(prefix, 0, sizeof prefix);
    memset(r, 0, sizeof r);
}

WSYNC_DEF int wsync_ed25519_verify(const uint8_t pub[32], const void *msg, size_t len, const uint8_t sig[64])
{
    wsync__edc k;
    wsync__ge A, R, sb, ka;
    uint8_t hk[32], check[32];
    wsync__fe zero;
    if (!pub || !sig || (!msg && len)) return 0;
    if (!wsync__sc_canonical(sig + 32)) return 0; /* S >= L */
    wsync__edc_init(&k);
    if (!wsync__ge_unpack(&k, &A, pub) || wsync__ge_small_order(&k, &A)) return 0;
    if (!wsync__ge_unpack(&k, &R, sig) || wsync__ge_small_order(&k, &R)) return 0;
    wsync__ed_challenge(hk, sig, pub, msg, len);
    /* [S]B - [k]A, encoded, against R's bytes */
    wsync__ge_scalarmult(&k, &sb, &k.b, sig + 32);
    wsync__ge_scalarmult(&k, &ka, &A, hk);
    wsync__fe_set(zero, 0);
    wsync__fe_sub(ka.x, zero, ka.x);
    wsync__fe_sub(ka.t, zero, ka.t);
    wsync__ge_add(&k, &sb, &sb, &ka);
    wsync__ge_pack(check, &sb);
    return memcmp(check, sig, 32) == 0;
}

/* ======================================================================
   Safetensors: reader  >>st-read
   ======================================================================
   Two passes over the header with the same code: the first validates and
   counts (tensors, shape entries, metadata pairs, string bytes), then one
   block is allocated exactly, and the second pass fills it. Validation of
   sizes and offsets follows as its own step. The whole header is checked as
   UTF-8 first, so the JSON tokenizer (wsync__js_, shared with HEAD's
   reader) only has to understand ASCII here. */

static int wsync__utf8_valid(const uint8_t *s, size_t n, size_t *bad)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len, k;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1Fu, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0Fu, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07u, min = 0x10000;
        else break;
        if (len > n - i) break;
        for (k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) break;
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if (k < len || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) break;
        i += len;
    }
    *bad = i;
    return i == n;
}

/* ---- the JSON tokenizer: every JSON reader of this header (the
   safetensors header, HEAD) >>json ----

   Plain functions over (s, n) and a cursor *i: whitespace, a string, a
   number, any value skipped. Each returns NULL when what it read is JSON,
   with *i past it, or a static text naming what is wrong, with *i at the
   byte it is about; the reader maps that to its own error. The flags say
   how strict a reader is beyond RFC 8259. */
#define WSYNC__JS_PLAIN 1u  /* strings: printable ASCII without escapes, not decoded */
#define WSYNC__JS_UTF8 2u   /* strings: each UTF-8 sequence checked (input not checked whole) */
#define WSYNC__JS_PAIRS 4u  /* strings: a \u surrogate must be one of a pair */
#define WSYNC__JS_VALUES 8u /* skip: the depth limit counts every value, not only containers */

static const char wsync__js_too_deep[] = "nesting deeper than the limit";

static size_t wsync__js_ws(const uint8_t *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

static int wsync__hex4(const uint8_t *s, uint32_t *out)
{
    uint32_t v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        int d = wsync__hexval(s[i]);
        if (d < 0) return 0;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 1;
}

/* The string at s[*i] (which must be '"'), decoded into out[0..cap) when
   out is given; *len gets the full decoded length, never more than the
   encoded one (with PLAIN: nothing decoded, *len the raw length). */
static const char *wsync__js_string(const uint8_t *s, size_t n, size_t *i, unsigned flags, char *out, size_t cap,
                                    size_t *len)
{
    size_t o = 0, p = *i;
    const char *why = NULL;
    if (p >= n || s[p] != '"') return "expected a string";
    p++;
    for (;;) {
        uint8_t c, buf[4];
        size_t k, nb = 1;
        if (p >= n) {
            why = "unterminated string";
            break;
        }
        c = s[p];
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20) {
            why = "control character in a string";
            break;
        }
        if ((flags & WSYNC__JS_PLAIN) && (c == '\\' || c >= 0x80)) {
            why = c == '\\' ? "an escape where a plain string is wanted" : "a non-ASCII byte where a plain string is wanted";
            break;
        }
        buf[0] = c;
        if (c >= 0x80 && (flags & WSYNC__JS_UTF8)) { /* one UTF-8 sequence, checked strictly */
            size_t sl = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2, bad;
            if (n - p < sl || !wsync__utf8_valid(s + p, sl, &bad)) {
                why = "invalid UTF-8 in a string";
                break;
            }
            for (k = 1; k < sl; k++) buf[k] = s[p + k];
            nb = sl;
            p += sl;
        } else if (c == '\\') {
            uint32_t cp, lo;
            if (n - p < 2) {
                why = "unterminated escape";
                break;
            }
            switch (s[p + 1]) {
            case '"': buf[0] = '"'; break;
            case '\\': buf[0] = '\\'; break;
            case '/': buf[0] = '/'; break;
            case 'b': buf[0] = '\b'; break;
            case 'f': buf[0] = '\f'; break;
            case 'n': buf[0] = '\n'; break;
            case 'r': buf[0] = '\r'; break;
            case 't': buf[0] = '\t'; break;
            case 'u':
                if (n - p < 6 || !wsync__hex4(s + p + 2, &cp)) {
                    why = "bad \\u escape";
                    break;
                }
                if ((flags & WSYNC__JS_PAIRS) && cp >= 0xDC00 && cp <= 0xDFFF) {
                    why = "lone low surrogate escape";
                    break;
                }
                if ((flags & WSYNC__JS_PAIRS) && cp >= 0xD800 && cp <= 0xDBFF) {
                    if (n - p < 12 || s[p + 6] != '\\' || s[p + 7] != 'u' || !wsync__hex4(s + p + 8, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF) {
                        why = "lone high surrogate escape";
                        break;
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
                p += 4; /* the 2 for "\\u" are added below */
                if (cp < 0x80) buf[0] = (uint8_t)cp;
                else if (cp < 0x800) {
                    buf[0] = (uint8_t)(0xC0 | (cp >> 6));
                    buf[1] = (uint8_t)(0x80 | (cp & 0x3F));
                    nb = 2;
                } else if (cp < 0x10000) {
                    buf[0] = (uint8_t)(0xE0 | (cp >> 12));
                    buf[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    buf[2] = (uint8_t)(0x80 | (cp & 0x3F));
                    nb = 3;
                } else {
                    buf[0] = (uint8_t)(0xF0 | (cp >> 18));
                    buf[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
                    buf[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    buf[3] = (uint8_t)(0x80 | (cp & 0x3F));
                    nb = 4;
                }
                break;
            default:
                why = "unknown escape";
            }
            if (why) break;
            p += 2;
        } else {
            p++;
        }
        for (k = 0; k < nb; k++, o++)
            if (out && o < cap) out[o] = (char)buf[k];
    }
    *i = p;
    if (!why) *len = o;
    return why;
}

/* A number by RFC 8259's grammar. *is_uint is set when it is a plain
   non-negative integer (no sign, fraction or exponent): then *value holds
   it exactly, or *overflow is set. */
static const char *wsync__js_number(const uint8_t *s, size_t n, size_t *pi, int *is_uint, uint64_t *value,
                                    int *overflow)
{
    size_t i = *pi;
    uint64_t v = 0;
    int plain = 1, ovf = 0;
    if (i < n && s[i] == '-') plain = 0, i++;
    if (i >= n || s[i] < '0' || s[i] > '9') return "bad number";
    if (s[i] == '0') {
        i++;
    } else {
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            unsigned d = (unsigned)(s[i] - '0');
            if (v > (UINT64_MAX - d) / 10) ovf = 1;
            else v = v * 10 + d;
            i++;
        }
    }
    if (i < n && s[i] == '.') {
        plain = 0, i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return "bad fraction";
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        plain = 0, i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return "bad exponent";
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    *pi = i;
    *is_uint = plain;
    *value = v;
    *overflow = ovf;
    return NULL;
}

/* Skips any JSON value at s[*i] (after whitespace). `depth` is the value's
   level: a container deeper than `max` (with VALUES: any value) is
   wsync__js_too_deep. */
static const char *wsync__js_skip(const uint8_t *s, size_t n, size_t *i, unsigned flags, uint32_t depth,
                                  uint32_t max)
{
    const char *why;
    int c, is_uint, ovf;
    uint64_t v;
    size_t len;
    if ((flags & WSYNC__JS_VALUES) && depth > max) return wsync__js_too_deep;
    *i = wsync__js_ws(s, n, *i);
    c = *i < n ? s[*i] : -1;
    if (c == '{' || c == '[') {
        int close = c == '{' ? '}' : ']';
        if (!(flags & WSYNC__JS_VALUES) && depth >= max) return wsync__js_too_deep;
        *i = wsync__js_ws(s, n, *i + 1);
        if (*i < n && s[*i] == close) {
            ++*i;
            return NULL;
        }
        for (;;) {
            *i = wsync__js_ws(s, n, *i);
            if (c == '{') {
                /* keys as plain as the reader's own (PLAIN stays) */
                if ((why = wsync__js_string(s, n, i, flags, NULL, 0, &len)) != NULL) return why;
                *i = wsync__js_ws(s, n, *i);
                if (*i >= n || s[*i] != ':') return "expected ':'";
                ++*i;
            }
            if ((why = wsync__js_skip(s, n, i, flags, depth + 1, max)) != NULL) return why;
            *i = wsync__js_ws(s, n, *i);
            if (*i < n && s[*i] == ',') {
                ++*i;
                continue;
            }
            if (*i < n && s[*i] == close) {
                ++*i;
                return NULL;
            }
            return c == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
        }
    }
    if (c == '"') return wsync__js_string(s, n, i, flags & ~WSYNC__JS_PLAIN, NULL, 0, &len);
    if (c == '-' || (c >= '0' && c <= '9')) return wsync__js_number(s, n, i, &is_uint, &v, &ovf);
    if (c == 't' || c == 'f' || c == 'n') {
        const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
        size_t ln = strlen(lit);
        if (n - *i < ln || memcmp(s + *i, lit, ln) != 0) return "invalid literal";
        *i += ln;
        return NULL;
    }
    return "expected a JSON value";
}

WSYNC_DEF wsync_result wsync_json_string(const char *text, size_t len, size_t *pos, char *out, size_t cap,
                                         size_t *out_len, wsync_error *err)
{
    size_t i, n = 0;
    const char *why;
    wsync__error_reset(err);
    if (!pos || (!text && len) || *pos > len)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_json_string needs text and a position inside it");
    i = *pos;
    why = wsync__js_string((const uint8_t *)text, len, &i, WSYNC__JS_UTF8 | WSYNC__JS_PAIRS, out, cap, &n);
    if (why) return wsync__fail(err, WSYNC_ERR_INVALID_JSON, (uint64_t)i, NULL, 0, "%s", why);
    *pos = i;
    if (out_len) *out_len = n;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_json_number(const char *text, size_t len, size_t *pos, wsync_error *err)
{
    size_t i;
    int is_uint, ovf;
    uint64_t v;
    const char *why;
    wsync__error_reset(err);
    if (!pos || (!text && len) || *pos > len)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_json_number needs text and a position inside it");
    i = *pos;
    why = wsync__js_number((const uint8_t *)text, len, &i, &is_uint, &v, &ovf);
    if (why) return wsync__fail(err, WSYNC_ERR_INVALID_JSON, (uint64_t)i, NULL, 0, "%s", why);
    *pos = i;
    return WSYNC_OK;
}

typedef struct wsync__stp_parser {
    const uint8_t *s;
    size_t n, pos;
    uint32_t depth, max_depth, max_rank;
    uint64_t max_tensors;
    wsync_error *err;
    int fill; /* 0: validate and count; 1: fill the block */
    size_t n_tensors, n_dims, n_meta, n_str;
    wsync_st_tensor *tensors;
    uint64_t *dims;
    wsync_st_kv *meta;
    char *str;
    int metadata_seen;
    wsync_st_metadata_kind metadata_kind;
    /* the tensor being parsed, for messages */
    const char *cur_name;
    size_t cur_name_len;
} wsync__stp_parser;

static uint64_t wsync__stp_fpos(const wsync__stp_parser *p)
{
    return 8 + (uint64_t)p->pos;
}

static wsync_result wsync__stp_pfail(wsync__stp_parser *p, wsync_result code, const char *fmt,
                                 const char *what)
{
    return wsync__fail(p->err, code, wsync__stp_fpos(p), p->cur_name, p->cur_name_len, fmt, what);
}

static void wsync__stp_ws(wsync__stp_parser *p)
{
    p->pos = wsync__js_ws(p->s, p->n, p->pos);
}

static int wsync__stp_peek(const wsync__stp_parser *p)
{
    return p->pos < p->n ? p->s[p->pos] : -1;
}

static wsync_result wsync__stp_expect(wsync__stp_parser *p, char c, const char *what)
{
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) != c) return wsync__stp_pfail(p, WSYNC_ERR_INVALID_JSON, "expected %s", what);
    p->pos++;
    return WSYNC_OK;
}

/* The string at p->pos, decoded into out[0..cap) when out is given (see
   wsync__js_string). */
static wsync_result wsync__stp_string(wsync__stp_parser *p, char *out, size_t cap, size_t *len)
{
    const char *why = wsync__js_string(p->s, p->n, &p->pos, WSYNC__JS_PAIRS, out, cap, len);
    return why ? wsync__stp_pfail(p, WSYNC_ERR_INVALID_JSON, "%s", why) : WSYNC_OK;
}

static wsync_result wsync__stp_number(wsync__stp_parser *p, int *is_uint, uint64_t *value, int *overflow)
{
    const char *why = wsync__js_number(p->s, p->n, &p->pos, is_uint, value, overflow);
    return why ? wsync__stp_pfail(p, WSYNC_ERR_INVALID_JSON, "%s", why) : WSYNC_OK;
}

static wsync_result wsync__stp_uint(wsync__stp_parser *p, uint64_t *out, const char *what)
{
    size_t start;
    int is_uint, ovf;
    wsync_result r;
    wsync__stp_ws(p);
    start = p->pos;
    if (wsync__stp_peek(p) != '-' && (wsync__stp_peek(p) < '0' || wsync__stp_peek(p) > '9'))
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s must be non-negative integers", what);
    if ((r = wsync__stp_number(p, &is_uint, out, &ovf)) != WSYNC_OK) return r;
    if (!is_uint) {
        p->pos = start;
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s must be non-negative integers", what);
    }
    if (ovf) {
        p->pos = start;
        return wsync__stp_pfail(p, WSYNC_ERR_OVERFLOW, "%s: integer above 2^64-1", what);
    }
    return WSYNC_OK;
}

/* Any value, nested containers counted from p->depth up to p->max_depth. */
static wsync_result wsync__stp_skip_value(wsync__stp_parser *p)
{
    const char *why = wsync__js_skip(p->s, p->n, &p->pos, WSYNC__JS_PAIRS, p->depth, p->max_depth);
    if (!why) return WSYNC_OK;
    return wsync__stp_pfail(p, why == wsync__js_too_deep ? WSYNC_ERR_NESTING_TOO_DEEP : WSYNC_ERR_INVALID_JSON, "%s", why);
}

/* Reads an object key into a small buffer for comparison against known
   names; *len is the full decoded length (longer keys are never known). */
static wsync_result wsync__stp_key(wsync__stp_parser *p, char *buf, size_t cap, size_t *len)
{
    wsync_result r;
    wsync__stp_ws(p);
    if ((r = wsync__stp_string(p, buf, cap, len)) != WSYNC_OK) return r;
    return wsync__stp_expect(p, ':', "':' after a key");
}

static int wsync__stp_key_is(const char *buf, size_t len, const char *name)
{
    return len == strlen(name) && memcmp(buf, name, len) == 0;
}

/* After a value in an array or object that close (']' or '}') ends: *more
   is 1 past a ',', 0 past close; anything else is an error in where. */
static wsync_result wsync__stp_next(wsync__stp_parser *p, char close, const char *where, int *more)
{
    wsync__stp_ws(p);
    *more = wsync__stp_peek(p) == ',';
    if (*more || wsync__stp_peek(p) == close) {
        p->pos++;
        return WSYNC_OK;
    }
    return wsync__stp_pfail(p, WSYNC_ERR_INVALID_JSON,
                            close == ']' ? "expected ',' or ']' in %s" : "expected ',' or '}' in %s", where);
}

/* Starting at '[' : non-negative integers into dims (when filling). */
static wsync_result wsync__stp_shape(wsync__stp_parser *p, wsync_st_tensor *t)
{
    wsync_result r;
    uint32_t rank = 0;
    uint64_t v;
    int more;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) != '[')
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s must be an array", "shape");
    p->pos++;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) == ']') {
        p->pos++;
    } else {
        for (;;) {
            if ((r = wsync__stp_uint(p, &v, "shape entries")) != WSYNC_OK) return r;
            if (rank >= p->max_rank)
                return wsync__stp_pfail(p, WSYNC_ERR_RANK_TOO_LARGE, "shape has more dimensions than the limit%s", "");
            if (p->fill) p->dims[p->n_dims + rank] = v;
            rank++;
            if ((r = wsync__stp_next(p, ']', "shape", &more)) != WSYNC_OK) return r;
            if (!more) break;
        }
    }
    if (p->fill) {
        t->rank = rank;
        t->shape = rank ? p->dims + p->n_dims : NULL;
    }
    p->n_dims += rank;
    return WSYNC_OK;
}

static wsync_result wsync__stp_offsets(wsync__stp_parser *p, uint64_t *begin, uint64_t *end)
{
    wsync_result r;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) != '[')
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s must be an array of two integers", "data_offsets");
    p->pos++;
    if ((r = wsync__stp_uint(p, begin, "data_offsets")) != WSYNC_OK) return r;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) != ',')
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s must be an array of two integers", "data_offsets");
    p->pos++;
    if ((r = wsync__stp_uint(p, end, "data_offsets")) != WSYNC_OK) return r;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) != ']')
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s must be an array of two integers", "data_offsets");
    p->pos++;
    return WSYNC_OK;
}

/* A tensor entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]},
   fields in any order; unknown fields are skipped (as the reference does). */
static wsync_result wsync__stp_tensor(wsync__stp_parser *p, wsync_st_tensor *t)
{
    wsync_result r;
    char key[16];
    size_t len;
    int seen_dtype = 0, seen_shape = 0, seen_offsets = 0, more;
    uint64_t begin = 0, end = 0;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) != '{')
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s", "a tensor entry must be an object");
    p->pos++;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) == '}') {
        p->pos++;
    } else {
        for (;;) {
            size_t key_pos;
            wsync__stp_ws(p);
            key_pos = p->pos;
            if ((r = wsync__stp_key(p, key, sizeof key, &len)) != WSYNC_OK) return r;
            if (wsync__stp_key_is(key, len, "dtype")) {
                char dt[16];
                size_t dlen;
                wsync_dtype d;
                if (seen_dtype++) goto duplicate;
                wsync__stp_ws(p);
                if (wsync__stp_peek(p) != '"')
                    return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s must be a string", "dtype");
                if ((r = wsync__stp_string(p, dt, sizeof dt, &dlen)) != WSYNC_OK) return r;
                d = dlen <= sizeof dt ? wsync_dtype_from_name(dt, dlen) : WSYNC_DTYPE_INVALID;
                if (d == WSYNC_DTYPE_INVALID) {
                    char shown[20];
                    wsync__name_copy(shown, sizeof shown, dt, dlen < sizeof dt ? dlen : sizeof dt);
                    return wsync__stp_pfail(p, WSYNC_ERR_UNKNOWN_DTYPE, "unknown dtype \"%s\"", shown);
                }
                if (p->fill) t->dtype = d;
            } else if (wsync__stp_key_is(key, len, "shape")) {
                if (seen_shape++) goto duplicate;
                if ((r = wsync__stp_shape(p, t)) != WSYNC_OK) return r;
            } else if (wsync__stp_key_is(key, len, "data_offsets")) {
                if (seen_offsets++) goto duplicate;
                if ((r = wsync__stp_offsets(p, &begin, &end)) != WSYNC_OK) return r;
            } else {
                if ((r = wsync__stp_skip_value(p)) != WSYNC_OK) return r;
            }
            if ((r = wsync__stp_next(p, '}', "a tensor entry", &more)) != WSYNC_OK) return r;
            if (more) continue;
            break;
        duplicate:
            p->pos = key_pos;
            return wsync__stp_pfail(p, WSYNC_ERR_DUPLICATE_KEY, "field \"%s\" appears twice",
                                seen_dtype > 1 ? "dtype" : seen_shape > 1 ? "shape" : "data_offsets");
        }
    }
    if (!seen_dtype || !seen_shape || !seen_offsets)
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "missing \"%s\"",
                            !seen_dtype ? "dtype" : !seen_shape ? "shape" : "data_offsets");
    if (p->fill) {
        t->begin = begin;
        t->end = end;
    }
    return WSYNC_OK;
}

/* Decodes a string into the string arena (fill pass) or counts it. */
static wsync_result wsync__stp_arena_string(wsync__stp_parser *p, const char **out, size_t *len)
{
    wsync_result r;
    if (!p->fill) {
        if ((r = wsync__stp_string(p, NULL, 0, len)) != WSYNC_OK) return r;
    } else {
        char *dst = p->str + p->n_str;
        if ((r = wsync__stp_string(p, dst, SIZE_MAX, len)) != WSYNC_OK) return r;
        dst[*len] = 0;
        *out = dst;
    }
    p->n_str += *len + 1;
    return WSYNC_OK;
}

static wsync_result wsync__stp_metadata(wsync__stp_parser *p)
{
    wsync_result r;
    int more;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) == 'n') {
        if ((r = wsync__stp_skip_value(p)) != WSYNC_OK) return r; /* "null", else "invalid literal" */
        p->metadata_kind = WSYNC_ST_METADATA_NULL;
        return WSYNC_OK;
    }
    if (wsync__stp_peek(p) != '{')
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_METADATA, "%s", "__metadata__ must be an object or null");
    p->metadata_kind = WSYNC_ST_METADATA_OBJECT;
    p->pos++;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) == '}') {
        p->pos++;
        return WSYNC_OK;
    }
    for (;;) {
        wsync_st_kv kv;
        memset(&kv, 0, sizeof kv);
        wsync__stp_ws(p);
        if ((r = wsync__stp_arena_string(p, &kv.key, &kv.key_len)) != WSYNC_OK) return r;
        if ((r = wsync__stp_expect(p, ':', "':' after a key")) != WSYNC_OK) return r;
        wsync__stp_ws(p);
        if (wsync__stp_peek(p) != '"')
            return wsync__stp_pfail(p, WSYNC_ERR_INVALID_METADATA, "%s", "__metadata__ values must be strings");
        if ((r = wsync__stp_arena_string(p, &kv.value, &kv.value_len)) != WSYNC_OK) return r;
        if (p->fill) p->meta[p->n_meta] = kv;
        p->n_meta++;
        if ((r = wsync__stp_next(p, '}', "__metadata__", &more)) != WSYNC_OK) return r;
        if (!more) return WSYNC_OK;
    }
}

static wsync_result wsync__stp_header(wsync__stp_parser *p)
{
    wsync_result r;
    int more;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) != '{') {
        if (p->pos >= p->n) return wsync__stp_pfail(p, WSYNC_ERR_INVALID_JSON, "%s", "empty header");
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_HEADER, "%s", "the header must be a JSON object");
    }
    p->pos++;
    wsync__stp_ws(p);
    if (wsync__stp_peek(p) == '}') {
        p->pos++;
    } else {
        for (;;) {
            char key[128]; /* enough to name the tensor in messages */
            size_t len, key_pos;
            wsync__stp_ws(p);
            key_pos = p->pos;
            if ((r = wsync__stp_string(p, key, sizeof key, &len)) != WSYNC_OK) return r;
            if (wsync__stp_key_is(key, len, "__metadata__")) {
                if (p->metadata_seen++) {
                    p->pos = key_pos;
                    return wsync__stp_pfail(p, WSYNC_ERR_DUPLICATE_KEY, "%s appears twice", "__metadata__");
                }
                if ((r = wsync__stp_expect(p, ':', "':' after a key")) != WSYNC_OK) return r;
                if ((r = wsync__stp_metadata(p)) != WSYNC_OK) return r;
            } else {
                wsync_st_tensor *t = NULL;
                const char *name = NULL;
                if (p->max_tensors && p->n_tensors >= p->max_tensors)
                    return wsync__stp_pfail(p, WSYNC_ERR_LIMIT, "more tensors than the limit%s", "");
                if (p->fill) {
                    t = &p->tensors[p->n_tensors];
                    p->pos = key_pos;
                    if ((r = wsync__stp_arena_string(p, &name, &len)) != WSYNC_OK) return r;
                    t->name = name;
                    t->name_len = len;
                    t->key_offset = 8 + (uint64_t)key_pos;
                    p->cur_name = name;
                    p->cur_name_len = len;
                } else {
                    p->n_str += len + 1;
                    p->cur_name = key;
                    p->cur_name_len = len < sizeof key ? len : sizeof key;
                }
                if ((r = wsync__stp_expect(p, ':', "':' after a key")) != WSYNC_OK) return r;
                if ((r = wsync__stp_tensor(p, t)) != WSYNC_OK) return r;
                p->cur_name = NULL;
                p->cur_name_len = 0;
                p->n_tensors++;
            }
            if ((r = wsync__stp_next(p, '}', "the header", &more)) != WSYNC_OK) return r;
            if (!more) break;
        }
    }
    wsync__stp_ws(p);
    if (p->pos != p->n)
        return wsync__stp_pfail(p, WSYNC_ERR_INVALID_JSON, "%s", "bytes after the JSON object");
    return WSYNC_OK;
}

static int wsync__stp_cmp_offsets(const void *a, const void *b)
{
    const wsync_st_tensor *x = (const wsync_st_tensor *)a, *y = (const wsync_st_tensor *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->key_offset < y->key_offset ? -1 : x->key_offset > y->key_offset;
}

static int wsync__cmp_names(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c) return c;
    return an < bn ? -1 : an > bn;
}

static int wsync__stp_cmp_tensor_names(const void *a, const void *b)
{
    const wsync_st_tensor *x = *(const wsync_st_tensor *const *)a;
    const wsync_st_tensor *y = *(const wsync_st_tensor *const *)b;
    int c = wsync__cmp_names(x->name, x->name_len, y->name, y->name_len);
    if (c) return c;
    return x->key_offset < y->key_offset ? -1 : x->key_offset > y->key_offset;
}

static int wsync__stp_cmp_kv_keys(const void *a, const void *b)
{
    const wsync_st_kv *x = *(const wsync_st_kv *const *)a;
    const wsync_st_kv *y = *(const wsync_st_kv *const *)b;
    int c = wsync__cmp_names(x->key, x->key_len, y->key, y->key_len);
    if (c) return c;
    return x->key < y->key ? -1 : x->key > y->key; /* arena order is header order */
}

/* Sizes and offsets, after the JSON is in: per tensor, then names, then the
   layout of the data section as a whole. */
static wsync_result wsync__stp_validate(wsync_st_file *f, wsync_error *err)
{
    size_t i;
    uint64_t expect = 0;
    for (i = 0; i < f->n_tensors; i++) {
        wsync_st_tensor *t = &f->tensors[i];
        uint64_t nelem = 1, nbytes = 0;
        uint32_t d;
        wsync_result r;
        for (d = 0; d < t->rank; d++) {
            if (!wsync_mul_u64(nelem, t->shape[d], &nelem))
                return wsync__fail(err, WSYNC_ERR_OVERFLOW, t->key_offset, t->name, t->name_len,
                                   "the product of the shape overflows 64 bits");
        }
        t->nelem = nelem;
        r = wsync_dtype_nbytes(t->dtype, nelem, &nbytes);
        if (r == WSYNC_ERR_OVERFLOW)
            return wsync__fail(err, r, t->key_offset, t->name, t->name_len,
                               "%llu elements of %s overflow 64 bits", (unsigned long long)nelem,
                               wsync_dtype_name(t->dtype));
        if (r != WSYNC_OK)
            return wsync__fail(err, WSYNC_ERR_SIZE_MISMATCH, t->key_offset, t->name, t->name_len,
                               "%llu elements of %s do not fill whole bytes",
                               (unsigned long long)nelem, wsync_dtype_name(t->dtype));
        if (t->begin > t->end)
            return wsync__fail(err, WSYNC_ERR_INVALID_OFFSETS, t->key_offset, t->name, t->name_len,
                               "data_offsets [%llu, %llu] are reversed",
                               (unsigned long long)t->begin, (unsigned long long)t->end);
        if (nbytes != t->end - t->begin)
            return wsync__fail(err, WSYNC_ERR_SIZE_MISMATCH, t->key_offset, t->name, t->name_len,
                               "shape and %s need %llu bytes but data_offsets span %llu",
                               wsync_dtype_name(t->dtype), (unsigned long long)nbytes,
                               (unsigned long long)(t->end - t->begin));
        if (t->end > f->data_len)
            return wsync__fail(err, WSYNC_ERR_OUT_OF_BOUNDS, t->key_offset, t->name, t->name_len,
                               "data_offsets end at %llu but the data section holds %llu bytes",
                               (unsigned long long)t->end, (unsigned long long)f->data_len);
    }
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, wsync__stp_cmp_offsets);
    for (i = 0; i < f->n_tensors; i++) {
        f->tensors[i].data = f->data ? f->data + f->tensors[i].begin : NULL; /* NULL: header only */
        f->by_name[i] = &f->tensors[i];
    }
    /* Names first: a duplicate is the root cause of the overlap it makes. */
    qsort(f->by_name, f->n_tensors, sizeof *f->by_name, wsync__stp_cmp_tensor_names);
    for (i = 1; i < f->n_tensors; i++) {
        const wsync_st_tensor *a = f->by_name[i - 1], *b = f->by_name[i];
        if (wsync__cmp_names(a->name, a->name_len, b->name, b->name_len) == 0)
            return wsync__fail(err, WSYNC_ERR_DUPLICATE_KEY, b->key_offset, b->name, b->name_len,
                               "the tensor name appears twice");
    }
    for (i = 0; i < f->n_tensors; i++) {
        wsync_st_tensor *t = &f->tensors[i];
        if (t->begin != expect)
            return wsync__fail(err, WSYNC_ERR_INVALID_OFFSETS, t->key_offset, t->name, t->name_len,
                               "data starts at %llu where %llu was expected (%s)",
                               (unsigned long long)t->begin, (unsigned long long)expect,
                               t->begin > expect ? "a hole before it" : "it overlaps the previous tensor");
        expect = t->end;
    }
    if (expect != f->data_len)
        return wsync__fail(err, WSYNC_ERR_TRAILING_BYTES, 8 + f->header_len + expect, NULL, 0,
                           "%llu byte%s after the last tensor's data", (unsigned long long)(f->data_len - expect),
                           f->data_len - expect == 1 ? "" : "s");
    return WSYNC_OK;
}

static wsync_result wsync__stp_check_meta_keys(wsync_st_file *f, wsync_error *err)
{
    const wsync_st_kv **keys;
    size_t i;
    wsync_result r = WSYNC_OK;
    if (f->n_metadata < 2) return WSYNC_OK;
    keys = (const wsync_st_kv **)wsync__alloc(&f->allocator, f->n_metadata * sizeof *keys);
    if (!keys) return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "metadata index");
    for (i = 0; i < f->n_metadata; i++) keys[i] = &f->metadata[i];
    qsort(keys, f->n_metadata, sizeof *keys, wsync__stp_cmp_kv_keys);
    for (i = 1; i < f->n_metadata; i++) {
        if (wsync__cmp_names(keys[i - 1]->key, keys[i - 1]->key_len, keys[i]->key, keys[i]->key_len) == 0) {
            char shown[64];
            wsync__name_copy(shown, sizeof shown, keys[i]->key, keys[i]->key_len);
            r = wsync__fail(err, WSYNC_ERR_DUPLICATE_KEY, UINT64_MAX, NULL, 0,
                            "__metadata__ key \"%s\" appears twice", shown);
            break;
        }
    }
    wsync__free(&f->allocator, keys);
    return r;
}

/* One allocation for everything the parsed file holds, laid out in order of
   alignment. */
static wsync_result wsync__stp_alloc_block(wsync_st_file *f, wsync__stp_parser *p, wsync_error *err)
{
    size_t sz_t, sz_idx, sz_dims, sz_meta, total = 0;
    uint8_t *b;
    if (!wsync_mul_size(p->n_tensors, sizeof(wsync_st_tensor), &sz_t) ||
        !wsync_mul_size(p->n_tensors, sizeof(wsync_st_tensor *), &sz_idx) ||
        !wsync_mul_size(p->n_dims, sizeof(uint64_t), &sz_dims) ||
        !wsync_mul_size(p->n_meta, sizeof(wsync_st_kv), &sz_meta) ||
        !wsync_add_size(total, sz_t, &total) || !wsync_add_size(total, sz_idx, &total) ||
        !wsync_add_size(total, sz_dims, &total) || !wsync_add_size(total, sz_meta, &total) ||
        !wsync_add_size(total, p->n_str, &total))
        return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, NULL, 0, "%s", "parsed header size");
    b = (uint8_t *)wsync__alloc(&f->allocator, total);
    if (!b)
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0,
                           "cannot allocate %llu bytes for the parsed header", (unsigned long long)total);
    memset(b, 0, total);
    f->block = b;
    p->tensors = (wsync_st_tensor *)(void *)b;
    f->by_name = (const wsync_st_tensor **)(void *)(b + sz_t);
    p->dims = (uint64_t *)(void *)(b + sz_t + sz_idx);
    p->meta = (wsync_st_kv *)(void *)(b + sz_t + sz_idx + sz_dims);
    p->str = (char *)(b + sz_t + sz_idx + sz_dims + sz_meta);
    return WSYNC_OK;
}

/* The schema is checked while the JSON is read, so a schema error can be
   met before a syntax error further on. The reference parses the JSON
   first; so do we, on the error path only: if the header is not JSON at
   all, that is the error reported. */
static wsync_result wsync__stp_syntax_first(const wsync_st_file *f, const wsync_st_options *o, wsync_result r,
                                        wsync_error *err)
{
    wsync__stp_parser q;
    wsync_error e;
    wsync_result s;
    if (r == WSYNC_ERR_INVALID_JSON || r == WSYNC_ERR_NESTING_TOO_DEEP || r == WSYNC_ERR_OUT_OF_MEMORY) return r;
    memset(&q, 0, sizeof q);
    q.s = f->bytes + 8;
    q.n = (size_t)f->header_len;
    /* the schema's own levels (header, entry, shape) on top, saturating */
    q.max_depth = o->max_depth > UINT32_MAX - 3 ? UINT32_MAX : o->max_depth + 3;
    q.err = &e;
    s = wsync__stp_skip_value(&q);
    if (s == WSYNC_OK) {
        wsync__stp_ws(&q);
        if (q.pos != q.n) s = wsync__stp_pfail(&q, WSYNC_ERR_INVALID_JSON, "%s", "bytes after the JSON value");
    }
    if (s == WSYNC_OK) return r;
    if (err) *err = e;
    return s;
}

/* wsync_st_parse of a `size`-byte file of which `bytes` holds the first
   `avail` (avail == size, or just the 8-byte length and the header: then the
   tensors' data pointers are NULL; a subscriber streaming an anchor). */
static wsync_result wsync__stp_parse_at(const void *bytes, uint64_t avail, uint64_t size, const wsync_st_options *opt,
                                       wsync_st_file *out, wsync_error *err)
{
    wsync_st_options o;
    wsync__stp_parser p;
    wsync_st_file f;
    wsync_result r;
    uint64_t n;
    size_t bad;
    wsync__error_reset(err);
    if (!out || (!bytes && size))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_st_parse needs bytes and an output");
    memset(out, 0, sizeof *out);
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (o.max_header_size == 0 || o.max_header_size > WSYNC_ST_MAX_HEADER_SIZE)
        o.max_header_size = WSYNC_ST_MAX_HEADER_SIZE;
    if (o.max_rank == 0) o.max_rank = WSYNC_ST_DEFAULT_MAX_RANK;
    if (o.max_depth == 0) o.max_depth = WSYNC_ST_DEFAULT_MAX_DEPTH;

    if (size < 8)
        return wsync__fail(err, WSYNC_ERR_TRUNCATED, 0, NULL, 0,
                           "%llu bytes, fewer than the 8-byte header length", (unsigned long long)size);
    n = wsync__load_le64((const uint8_t *)bytes);
    if (n > o.max_header_size || n > size - 8) {
        /* no '{' after the length: most likely not a safetensors file at all
           (a README, an HTML error page): say so before the numbers */
        const char *what = avail > 8 && size > 8 && ((const uint8_t *)bytes)[8] != '{'
                               ? "this does not look like a safetensors file (which starts with its JSON header's "
                                 "length, then '{'): its first 8 bytes read as a "
                               : "";
        if (n > o.max_header_size)
            return wsync__fail(err, WSYNC_ERR_HEADER_TOO_LARGE, 0, NULL, 0,
                               "%sheader length %llu, above the limit of %llu bytes (the input is %llu bytes)", what,
                               (unsigned long long)n, (unsigned long long)o.max_header_size,
                               (unsigned long long)size);
        return wsync__fail(err, WSYNC_ERR_TRUNCATED, 0, NULL, 0,
                           "%sheader length %llu, which runs past the end of the %llu-byte input", what,
                           (unsigned long long)n, (unsigned long long)size);
    }
    if (avail < size && (avail < 8 || n > avail - 8))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, 0, NULL, 0, "%s", "the header is not all there");

    memset(&f, 0, sizeof f);
    f.bytes = (const uint8_t *)bytes;
    f.size = size;
    f.header_len = n;
    f.data = avail < size ? NULL : f.bytes + 8 + n;
    f.data_len = size - 8 - n;
    f.allocator = o.allocator;

    if (!wsync__utf8_valid(f.bytes + 8, (size_t)n, &bad))
        return wsync__fail(err, WSYNC_ERR_INVALID_UTF8, 8 + (uint64_t)bad, NULL, 0, "%s",
                           "invalid UTF-8 sequence in the header");

    memset(&p, 0, sizeof p);
    p.s = f.bytes + 8;
    p.n = (size_t)n;
    p.max_depth = o.max_depth;
    p.max_rank = o.max_rank;
    p.max_tensors = o.max_tensors;
    p.err = err;
    if ((r = wsync__stp_header(&p)) != WSYNC_OK) return wsync__stp_syntax_first(&f, &o, r, err);
    if ((r = wsync__stp_alloc_block(&f, &p, err)) != WSYNC_OK) return r;

    /* Second pass over a header already known to be valid: fill. */
    p.fill = 1;
    p.pos = 0;
    p.depth = 0;
    p.n_tensors = p.n_dims = p.n_meta = p.n_str = 0;
    p.metadata_seen = 0;
    p.metadata_kind = WSYNC_ST_METADATA_ABSENT;
    r = wsync__stp_header(&p);
    WSYNC_ASSERT(r == WSYNC_OK);
    f.tensors = p.tensors;
    f.n_tensors = p.n_tensors;
    f.metadata = p.n_meta ? p.meta : NULL;
    f.n_metadata = p.n_meta;
    f.metadata_kind = p.metadata_kind;

    if ((r = wsync__stp_check_meta_keys(&f, err)) != WSYNC_OK || (r = wsync__stp_validate(&f, err)) != WSYNC_OK) {
        wsync__free(&f.allocator, f.block);
        return r;
    }
    *out = f;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_st_parse(const void *bytes, uint64_t size, const wsync_st_options *opt,
                                      wsync_st_file *out, wsync_error *err)
{
    return wsync__stp_parse_at(bytes, size, size, opt, out, err);
}

WSYNC_DEF wsync_result wsync_st_parse_header(const void *prefix, size_t len, uint64_t file_size,
                                             const wsync_st_options *opt, wsync_st_file *out, uint64_t *need,
                                             wsync_error *err)
{
    uint64_t want = 8, n, max;
    if (need) *need = 0;
    wsync__error_reset(err);
    if (out) memset(out, 0, sizeof *out);
    if (!out || (!prefix && len) || (uint64_t)len > file_size)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           "wsync_st_parse_header needs a prefix of at most the file's %llu bytes and an output "
                           "(%llu given)", (unsigned long long)file_size, (unsigned long long)len);
    if ((uint64_t)len == file_size) return wsync__stp_parse_at(prefix, file_size, file_size, opt, out, err);
    if (len >= 8) {
        max = opt && opt->max_header_size && opt->max_header_size < WSYNC_ST_MAX_HEADER_SIZE
                  ? opt->max_header_size : WSYNC_ST_MAX_HEADER_SIZE;
        n = wsync__load_le64((const uint8_t *)prefix);
        /* a length the reader refuses (too large, past the end) is its
           error, said as it says it; else the header is 8 + n bytes */
        if (n > max || n > file_size - 8 || n <= (uint64_t)len - 8)
            return wsync__stp_parse_at(prefix, (uint64_t)len, file_size, opt, out, err);
        want = 8 + n;
    } else if (file_size < 8) {
        return wsync__fail(err, WSYNC_ERR_TRUNCATED, 0, NULL, 0, "%llu bytes, fewer than the 8-byte header length",
                           (unsigned long long)file_size);
    }
    if (need) *need = want;
    return wsync__fail(err, WSYNC_ERR_TRUNCATED, (uint64_t)len, NULL, 0,
                       "the safetensors header is the first %llu bytes of the file; %llu given",
                       (unsigned long long)want, (unsigned long long)len);
}

WSYNC_DEF void wsync_st_free(wsync_st_file *f)
{
    if (!f) return;
    wsync__free(&f->allocator, f->block);
    memset(f, 0, sizeof *f);
}

WSYNC_DEF const wsync_st_tensor *wsync_st_find_n(const wsync_st_file *f, const char *name, size_t len)
{
    size_t lo = 0, hi;
    if (!f || !name || !f->by_name) return NULL;
    hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const wsync_st_tensor *t = f->by_name[mid];
        int c = wsync__cmp_names(t->name, t->name_len, name, len);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

WSYNC_DEF const wsync_st_tensor *wsync_st_find(const wsync_st_file *f, const char *name)
{
    return name ? wsync_st_find_n(f, name, strlen(name)) : NULL;
}

WSYNC_DEF wsync_result wsync_st_check_names(const wsync_st_file *f, wsync_error *err)
{
    size_t i;
    wsync__error_reset(err);
    if (!f) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no file");
    for (i = 0; i < f->n_tensors; i++) {
        const wsync_st_tensor *t = &f->tensors[i];
        const char *z = (const char *)memchr(t->name, 0, t->name_len);
        if (z)
            return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, t->key_offset, t->name, t->name_len,
                               "name contains U+0000 at byte %llu of the name: cannot be matched to a C-string name",
                               (unsigned long long)(z - t->name));
    }
    return WSYNC_OK;
}

WSYNC_DEF const char *wsync_st_metadata_get(const wsync_st_file *f, const char *key)
{
    size_t i, len;
    if (!f || !key) return NULL;
    len = strlen(key);
    for (i = 0; i < f->n_metadata; i++)
        if (f->metadata[i].key_len == len && memcmp(f->metadata[i].key, key, len) == 0)
            return f->metadata[i].value;
    return NULL;
}

/* ======================================================================
   Safetensors: writer  >>st-write
   ====================================================================== */

/* Counts when buf is NULL, writes otherwise: one code path sizes and emits
   the header, so the two can never disagree. */
typedef struct wsync__emit {
    char *buf;
    size_t len;
} wsync__emit;

static void wsync__emit_raw(wsync__emit *e, const char *s, size_t n)
{
    if (e->buf) memcpy(e->buf + e->len, s, n);
    e->len += n;
}

static void wsync__emit_json_string(wsync__emit *e, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t i;
    wsync__emit_raw(e, "\"", 1);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            wsync__emit_raw(e, esc, 2);
        } else if (c < 0x20) {
            esc[0] = '\\';
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            wsync__emit_raw(e, esc, 6);
        } else {
            wsync__emit_raw(e, (const char *)&s[i], 1);
        }
    }
    wsync__emit_raw(e, "\"", 1);
}

static void wsync__emit_u64(wsync__emit *e, uint64_t v)
{
    char tmp[24];
    int n = 0, i;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (i = 0; i < n / 2; i++) {
        char c = tmp[i];
        tmp[i] = tmp[n - 1 - i];
        tmp[n - 1 - i] = c;
    }
    wsync__emit_raw(e, tmp, (size_t)n);
}

static size_t wsync__desc_name_len(const wsync_st_tensor_desc *t)
{
    return t->name_len ? t->name_len : strlen(t->name);
}

/* Emits header JSON (without padding). Descriptions are already checked. */
static void wsync__emit_header(wsync__emit *e, const wsync_st_tensor_desc *ts, size_t n,
                               const wsync_st_kv *meta, size_t n_meta)
{
    size_t i;
    uint32_t d;
    uint64_t off = 0;
    int first = 1;
    wsync__emit_raw(e, "{", 1);
    if (meta) {
        wsync__emit_raw(e, "\"__metadata__\":{", 16);
        for (i = 0; i < n_meta; i++) {
            const wsync_st_kv *kv = &meta[i];
            if (i) wsync__emit_raw(e, ",", 1);
            wsync__emit_json_string(e, kv->key, kv->key_len ? kv->key_len : strlen(kv->key));
            wsync__emit_raw(e, ":", 1);
            wsync__emit_json_string(e, kv->value, kv->value_len ? kv->value_len : strlen(kv->value));
        }
        wsync__emit_raw(e, "}", 1);
        first = 0;
    }
    for (i = 0; i < n; i++) {
        const wsync_st_tensor_desc *t = &ts[i];
        if (!first) wsync__emit_raw(e, ",", 1);
        first = 0;
        wsync__emit_json_string(e, t->name, wsync__desc_name_len(t));
        wsync__emit_raw(e, ":{\"dtype\":", 10);
        wsync__emit_json_string(e, wsync_dtype_name(t->dtype), strlen(wsync_dtype_name(t->dtype)));
        wsync__emit_raw(e, ",\"shape\":[", 10);
        for (d = 0; d < t->rank; d++) {
            if (d) wsync__emit_raw(e, ",", 1);
            wsync__emit_u64(e, t->shape[d]);
        }
        wsync__emit_raw(e, "],\"data_offsets\":[", 18);
        wsync__emit_u64(e, off);
        wsync__emit_raw(e, ",", 1);
        off += t->nbytes;
        wsync__emit_u64(e, off);
        wsync__emit_raw(e, "]}", 2);
    }
    wsync__emit_raw(e, "}", 1);
}

typedef struct wsync__name_ref {
    const char *s;
    size_t n;
    size_t index;
} wsync__name_ref;

static int wsync__cmp_name_refs(const void *a, const void *b)
{
    const wsync__name_ref *x = (const wsync__name_ref *)a, *y = (const wsync__name_ref *)b;
    int c = wsync__cmp_names(x->s, x->n, y->s, y->n);
    if (c) return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Rejects a write the reader would refuse; *data_len and *header_len (the
   JSON length before padding) on success. */
static wsync_result wsync__check_write(const wsync_st_tensor_desc *ts, size_t n, const wsync_st_kv *meta,
                                       size_t n_meta, const wsync_allocator *a, uint64_t *data_len,
                                       uint64_t *json_len, wsync_error *err)
{
    size_t i, bad, count = n > n_meta ? n : n_meta;
    uint32_t d;
    uint64_t total = 0;
    wsync__name_ref *refs = NULL;
    wsync__emit e;
    wsync_result r = WSYNC_OK;
    /* set on every path: the callers read them only after WSYNC_OK, which
       the compiler cannot see through wsync__fail once it inlines them */
    *data_len = 0;
    *json_len = 0;
    if ((n && !ts) || (n_meta && !meta))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "tensors or metadata missing");
    for (i = 0; i < n; i++) {
        const wsync_st_tensor_desc *t = &ts[i];
        uint64_t nelem = 1, nbytes;
        size_t len;
        if (!t->name)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                               "tensor %llu has no name", (unsigned long long)i);
        len = wsync__desc_name_len(t);
        if (!wsync__utf8_valid((const uint8_t *)t->name, len, &bad))
            return wsync__fail(err, WSYNC_ERR_INVALID_UTF8, UINT64_MAX, t->name, len, "%s",
                               "tensor names must be valid UTF-8");
        if (len == 12 && memcmp(t->name, "__metadata__", 12) == 0)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, t->name, len, "%s",
                               "__metadata__ is reserved");
        if (wsync_dtype_bits(t->dtype) == 0)
            return wsync__fail(err, WSYNC_ERR_UNKNOWN_DTYPE, UINT64_MAX, t->name, len, "dtype %d",
                               (int)t->dtype);
        if (t->rank > WSYNC_ST_DEFAULT_MAX_RANK || (t->rank && !t->shape))
            return wsync__fail(err, WSYNC_ERR_RANK_TOO_LARGE, UINT64_MAX, t->name, len,
                               "rank %u (limit %u, shape given: %s)", (unsigned)t->rank,
                               WSYNC_ST_DEFAULT_MAX_RANK, t->shape ? "yes" : "no");
        for (d = 0; d < t->rank; d++)
            if (!wsync_mul_u64(nelem, t->shape[d], &nelem))
                return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, t->name, len, "%s",
                                   "the product of the shape overflows 64 bits");
        r = wsync_dtype_nbytes(t->dtype, nelem, &nbytes);
        if (r != WSYNC_OK)
            return wsync__fail(err, r, UINT64_MAX, t->name, len, "%llu elements of %s",
                               (unsigned long long)nelem, wsync_dtype_name(t->dtype));
        if (nbytes != t->nbytes)
            return wsync__fail(err, WSYNC_ERR_SIZE_MISMATCH, UINT64_MAX, t->name, len,
                               "shape and %s need %llu bytes, %llu given", wsync_dtype_name(t->dtype),
                               (unsigned long long)nbytes, (unsigned long long)t->nbytes);
        if (!wsync_add_u64(total, nbytes, &total))
            return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, t->name, len, "%s",
                               "total data size overflows 64 bits");
    }
    for (i = 0; i < n_meta; i++) {
        const wsync_st_kv *kv = &meta[i];
        size_t kl, vl;
        if (!kv->key || !kv->value)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                               "metadata entry %llu lacks a key or value", (unsigned long long)i);
        kl = kv->key_len ? kv->key_len : strlen(kv->key);
        vl = kv->value_len ? kv->value_len : strlen(kv->value);
        if (!wsync__utf8_valid((const uint8_t *)kv->key, kl, &bad) ||
            !wsync__utf8_valid((const uint8_t *)kv->value, vl, &bad))
            return wsync__fail(err, WSYNC_ERR_INVALID_UTF8, UINT64_MAX, NULL, 0,
                               "metadata entry %llu is not valid UTF-8", (unsigned long long)i);
    }
    /* Duplicates: tensor names, then metadata keys, each sorted once. */
    if (count > 1) {
        refs = (wsync__name_ref *)wsync__alloc(a, count * sizeof *refs);
        if (!refs) return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "name index");
        for (i = 0; i < n; i++) {
            refs[i].s = ts[i].name;
            refs[i].n = wsync__desc_name_len(&ts[i]);
            refs[i].index = i;
        }
        qsort(refs, n, sizeof *refs, wsync__cmp_name_refs);
        for (i = 1; i < n && r == WSYNC_OK; i++)
            if (wsync__cmp_names(refs[i - 1].s, refs[i - 1].n, refs[i].s, refs[i].n) == 0)
                r = wsync__fail(err, WSYNC_ERR_DUPLICATE_KEY, UINT64_MAX, refs[i].s, refs[i].n, "%s",
                                "two tensors have this name");
        for (i = 0; i < n_meta && r == WSYNC_OK; i++) {
            refs[i].s = meta[i].key;
            refs[i].n = meta[i].key_len ? meta[i].key_len : strlen(meta[i].key);
            refs[i].index = i;
        }
        if (r == WSYNC_OK) qsort(refs, n_meta, sizeof *refs, wsync__cmp_name_refs);
        for (i = 1; i < n_meta && r == WSYNC_OK; i++)
            if (wsync__cmp_names(refs[i - 1].s, refs[i - 1].n, refs[i].s, refs[i].n) == 0)
                r = wsync__fail(err, WSYNC_ERR_DUPLICATE_KEY, UINT64_MAX, NULL, 0, "%s",
                                "two metadata entries have the same key");
        wsync__free(a, refs);
        if (r != WSYNC_OK) return r;
    }
    e.buf = NULL;
    e.len = 0;
    wsync__emit_header(&e, ts, n, meta, n_meta);
    if ((uint64_t)e.len + 7 > WSYNC_ST_MAX_HEADER_SIZE)
        return wsync__fail(err, WSYNC_ERR_HEADER_TOO_LARGE, UINT64_MAX, NULL, 0,
                           "the header would be %llu bytes, above the limit",
                           (unsigned long long)e.len);
    *data_len = total;
    *json_len = e.len;
    return WSYNC_OK;
}

WSYNC_DEF int wsync_buffer_sink(void *user, const void *bytes, size_t len)
{
    wsync_buffer *b = (wsync_buffer *)user;
    if (!b || len > b->cap - b->len) return -1;
    if (len) memcpy(b->bytes + b->len, bytes, len);
    b->len += len;
    return 0;
}

WSYNC_DEF wsync_result wsync_st_write_size(const wsync_st_tensor_desc *tensors, size_t n_tensors,
                                           const wsync_st_kv *metadata, size_t n_metadata,
                                           uint64_t *out, wsync_error *err)
{
    uint64_t data_len, json_len, total;
    wsync_result r;
    wsync__error_reset(err);
    if (!out) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no output");
    r = wsync__check_write(tensors, n_tensors, metadata, n_metadata, NULL, &data_len, &json_len, err);
    if (r != WSYNC_OK) return r;
    total = 8 + ((json_len + 7) & ~(uint64_t)7);
    if (!wsync_add_u64(total, data_len, out))
        return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, NULL, 0, "%s", "file size overflows 64 bits");
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_st_writer_begin(wsync_st_writer *w, const wsync_st_tensor_desc *tensors,
                                             size_t n_tensors, const wsync_st_kv *metadata,
                                             size_t n_metadata, wsync_sink_fn sink, void *user,
                                             const wsync_st_write_options *opt, wsync_error *err)
{
    const wsync_allocator *a = opt ? &opt->allocator : NULL;
    uint64_t data_len, json_len, padded;
    wsync__emit e;
    wsync_result r;
    int rc;
    wsync__error_reset(err);
    if (!w || !sink)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_st_writer_begin needs a writer and a sink");
    memset(w, 0, sizeof *w);
    w->failed = 1;
    r = wsync__check_write(tensors, n_tensors, metadata, n_metadata, a, &data_len, &json_len, err);
    if (r != WSYNC_OK) return r;
    padded = (json_len + 7) & ~(uint64_t)7;
    e.buf = (char *)wsync__alloc(a, (size_t)padded + 8);
    if (!e.buf)
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0,
                           "cannot allocate the %llu-byte header", (unsigned long long)padded);
    wsync__store_le64((uint8_t *)e.buf, padded);
    e.len = 8;
    wsync__emit_header(&e, tensors, n_tensors, metadata, n_metadata);
    WSYNC_ASSERT(e.len == json_len + 8);
    memset(e.buf + e.len, ' ', (size_t)(padded - json_len));
    rc = sink(user, e.buf, (size_t)padded + 8);
    wsync__free(a, e.buf);
    if (rc != 0)
        return wsync__fail(err, WSYNC_ERR_SINK, 0, NULL, 0, "the sink failed (%d) writing the header", rc);
    w->sink = sink;
    w->user = user;
    w->header_len = padded;
    w->data_len = data_len;
    w->failed = 0;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_st_writer_data(wsync_st_writer *w, const void *bytes, size_t len,
                                            wsync_error *err)
{
    int rc;
    wsync__error_reset(err);
    if (!w || w->failed || (!bytes && len))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "the writer is not open (or an earlier call failed)");
    if (len > w->data_len - w->written) {
        w->failed = 1;
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, 8 + w->header_len + w->written, NULL, 0,
                           "%llu more bytes than the %llu declared", (unsigned long long)(len - (w->data_len - w->written)),
                           (unsigned long long)w->data_len);
    }
    if (len == 0) return WSYNC_OK;
    rc = w->sink(w->user, bytes, len);
    if (rc != 0) {
        w->failed = 1;
        return wsync__fail(err, WSYNC_ERR_SINK, 8 + w->header_len + w->written, NULL, 0,
                           "the sink failed (%d)", rc);
    }
    w->written += len;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_st_writer_end(wsync_st_writer *w, wsync_error *err)
{
    wsync__error_reset(err);
    if (!w || w->failed)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "the writer is not open (or an earlier call failed)");
    if (w->written != w->data_len) {
        w->failed = 1;
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, 8 + w->header_len + w->written, NULL, 0,
                           "%llu of the %llu declared data bytes were written",
                           (unsigned long long)w->written, (unsigned long long)w->data_len);
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_st_write(const wsync_st_tensor_desc *tensors, size_t n_tensors,
                                      const wsync_st_kv *metadata, size_t n_metadata,
                                      wsync_sink_fn sink, void *user,
                                      const wsync_st_write_options *opt, wsync_error *err)
{
    wsync_st_writer w;
    wsync_result r;
    size_t i;
    for (i = 0; i < n_tensors && tensors; i++)
        if (!tensors[i].data && tensors[i].nbytes)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, tensors[i].name,
                               tensors[i].name ? wsync__desc_name_len(&tensors[i]) : 0, "%s",
                               "no data to write (use the streaming writer)");
    r = wsync_st_writer_begin(&w, tensors, n_tensors, metadata, n_metadata, sink, user, opt, err);
    if (r != WSYNC_OK) return r;
    for (i = 0; i < n_tensors; i++) {
        /* size_t may be narrower than uint64_t: feed in chunks that fit */
        const uint8_t *p = (const uint8_t *)tensors[i].data;
        uint64_t left = tensors[i].nbytes;
        while (left) {
            size_t chunk = left > (uint64_t)(SIZE_MAX / 2) ? SIZE_MAX / 2 : (size_t)left;
            if ((r = wsync_st_writer_data(&w, p, chunk, err)) != WSYNC_OK) return r;
            p += chunk;
            left -= chunk;
        }
    }
    return wsync_st_writer_end(&w, err);
}


/* ======================================================================
   Delta: digest and diff  >>digest
   ====================================================================== */

/* wsync64: eight 64-bit lanes, each stripe of 64 bytes does per lane
   acc += lo32(d ^ key) * hi32(d ^ key) and adds the raw word to the
   neighbouring lane (so no input word can cancel out), with a scramble
   every 1 KiB. The structure is XXH3's accumulator, written here in a form
   SSE2, AVX2 and AVX-512 compute exactly (32x32->64 multiplies, 64-bit
   adds). */
#define WSYNC__D_PRIME32 0x9E3779B1u
#define WSYNC__D_P1 0x9E3779B185EBCA87ull
#define WSYNC__D_P2 0xC2B2AE3D27D4EB4Full
#define WSYNC__D_P3 0x165667B19E3779F9ull
static const uint64_t wsync__dkey[16] = {
    0xbe4ba423396cfeb8ull, 0x1cad21f72c81017cull, 0xdb979083e96dd4deull, 0x1f67b3b7a4a44072ull,
    0x78e5c0cc4ee679cbull, 0x2172ffcc7dd05a82ull, 0x8e2443f7744608b8ull, 0x4c263a81e69035e0ull,
    0xcb00c391bb52283cull, 0xa32e531b8b65d088ull, 0x4ef90da297486471ull, 0xd8acdea946ef1938ull,
    0x3f349ce33f76faa8ull, 0x1d4f0bc7c7bbdcf9ull, 0x3159b4cd4be0518aull, 0x647378d9c97e9fc8ull};

/* One key per stripe position within a 1 KiB round, so that moving data
   between stripes changes the digest (sums of per-stripe terms commute). */
static const uint64_t wsync__dstripe_key[16][8] = {
    {0x494fb499c0a112a9ull, 0x6bb8b3e85fc0aac1ull, 0x8474c6f7f0e337c5ull, 0x408cfa6e107af424ull, 0x609c5de615821371ull, 0xbe9dcbd35bd4e1d7ull, 0x3b2dda24696e9435ull, 0xdd7f408854500869ull},
    {0xfa58fe89bb3ff797ull, 0xe9cde407940f6ab8ull, 0xac5b2ffc037bcae4ull, 0xfc936c1098d882f1ull, 0xc7bcbcaf4d00a778ull, 0x9122fe78c0a0d07cull, 0xb77df1926591d11dull, 0x825a8174444da6c7ull},
    {0x68086566718102d1ull, 0x9acabdbb73b4cce1ull, 0xbb929078d43506afull, 0x808347928ea2e4e7ull, 0xca2d43e9a6372077ull, 0xea7d0276078c8d4bull, 0x66fef6fb65f106a8ull, 0x031c14f059ac5b14ull},
    {0x33b8a9b4d8feacd9ull, 0xc607d6e90a39ce22ull, 0x73c24251137c1fc9ull, 0xf4515879255693c2ull, 0xf895f3248e619cc8ull, 0x95d70c9a6f08c0d1ull, 0xd5ad8ac867f8ef14ull, 0xb5519dd2c59038b3ull},
    {0x98fce861c8fe37f6ull, 0xcd5886fd89087703ull, 0x4bd3e68b12c1451cull, 0x975bbbc14a7d6dadull, 0x511c01ebd596a7daull, 0xc46797c0e8d5f6f5ull, 0x0fecad4b65077678ull, 0x82cc51e7a130827dull},
    {0x54e9a05a99913118ull, 0x923a7c0cc3ceee35ull, 0x09c20bd0badab3a4ull, 0x9d90ff07a6a13f12ull, 0xc9047cca4491a2deull, 0xad28df0e6aee1134ull, 0x381d510144c7d90cull, 0xd00904e54d9c6265ull},
    {0x6869f34a825a5defull, 0xa380884d49e4f0c5ull, 0xdfe7b81c13e18a9cull, 0xc68f818095d317feull, 0x33967d1fa8965b50ull, 0xc992592dee256f7bull, 0xa25ce53378174572ull, 0x6ea2c0a25d7a8b36ull},
    {0x43e87bb44f43e7a1ull, 0xe20996bd86b501d5ull, 0x1208d2e6973b60a4ull, 0x91778d3927d1b8c3ull, 0x1930aa8e98729d0full, 0xa34cb596d9c6d6ffull, 0x082d9cc542d1b1e2ull, 0x7e51a3ba0c01c48eull},
    {0x63fe9419f2628901ull, 0xc9261df33fa0ec8eull, 0x2644dbb2180a9d82ull, 0x85e5ab1d485688baull, 0xb7b8201440f0fed1ull, 0x1b5ba144adf9ad63ull, 0x89f5ed6350257f3bull, 0x23f36feb3c90ea83ull},
    {0x8258d18e28dcf058ull, 0xcaf9b1bca661fa27ull, 0x8fad0f7888088412ull, 0xd7cb27652b763acfull, 0x1ced0eacaa3ba96full, 0x6c5d416575c899ffull, 0xc627b21358f43af5ull, 0xa0ef0f7e2a7a2c08ull},
    {0x9270eb5a9bc9de35ull, 0x42ccf1b6dc4c03a4ull, 0x0ac28d228df51f54ull, 0x72562e42cd3503efull, 0xea3a9d1d54e6c1ccull, 0x7f7ee7daa79f416cull, 0xa0a9852195b8b1f5ull, 0x4eadb8143813431full},
    {0xcf821be8ff8aec53ull, 0xf919ed4f71450e8aull, 0x9690308e6ffbf019ull, 0xd61542686ce13be1ull, 0xf6e5ada7d0d3f38aull, 0xc4a30ac7c78f6b6bull, 0x8cc16b34d4b00d57ull, 0x2525f3581de16d88ull},
    {0x202ae97084e6aeb7ull, 0x844bc8d76daafe71ull, 0x7165281758036b77ull, 0x57bd4da7d4c5f5bfull, 0xf45fbf3cda61c21full, 0x8011d22e077ec5fdull, 0x8e47940e90953d3dull, 0x54999d374697d3b1ull},
    {0x2bbba8b9a1f3560aull, 0x8dd2a788ed72897cull, 0xa56604d6cb8ce916ull, 0x2bd62aa5ee7de4deull, 0xc4bfe90fa3682115ull, 0xcb94d964f9699898ull, 0x15c51fc0ebb04265ull, 0xb5c9cabaf1f18dddull},
    {0xc4bf3b4edce1b377ull, 0x29feac1d1899421dull, 0xa4d7d75cf93b31bbull, 0x7cf52e27a717924bull, 0xf9e97bb0eeda2450ull, 0x1408de361db21768ull, 0x66fe23a561ab04a1ull, 0x48c8fd8ef34c1fcdull},
    {0xca3e02acb4c4145cull, 0xe3a75b1aa4192b6bull, 0x51d44add3303fb9eull, 0x60a6e712f5080b5full, 0x04c9275f8afe997bull, 0x02ccd16d3eb42c9aull, 0x331f57826cf9845eull, 0x9c8270e94c56940bull},
};

static void wsync__dstripe_scalar(uint64_t acc[8], const uint8_t *p, const uint64_t *key)
{
    int i;
    for (i = 0; i < 8; i++) {
        uint64_t d = wsync__le64(p + 8 * i), k = d ^ key[i];
        acc[i ^ 1] += d;
        acc[i] += (k & 0xFFFFFFFFu) * (k >> 32);
    }
}

static void wsync__dscramble(uint64_t acc[8])
{
    int i;
    for (i = 0; i < 8; i++) {
        uint64_t a = acc[i];
        a ^= a >> 47;
        a ^= wsync__dkey[8 + i];
        acc[i] = a * WSYNC__D_PRIME32;
    }
}

/* Whole 1 KiB rounds (16 stripes, then a scramble) for `rounds` rounds. */
static void wsync__drounds_scalar(uint64_t acc[8], const uint8_t *p, size_t rounds)
{
    size_t r;
    int s;
    for (r = 0; r < rounds; r++, p += 1024) {
        for (s = 0; s < 16; s++) wsync__dstripe_scalar(acc, p + 64 * s, wsync__dstripe_key[s]);
        wsync__dscramble(acc);
    }
}

#if WSYNC__X86
/* The rounds' prefetch reads memory as two streams, not one. A core
   keeps fewer loads in flight on one sequential stream than on two, and a
   plain prefetch a little ahead does not close the gap. So the bytes go in
   blocks of WSYNC__DBLOCK: while one block is digested, each pair of
   stripes prefetches two lines of the next block into L2, one from each of
   its halves, so that two streams come from memory at once. A block is
   large enough for the prefetches to run well ahead and small enough that
   two fit in L2. The last block has no next block to fetch; a first block
   comes in by the hardware's prefetch. */
#define WSYNC__DBLOCK 65536 /* bytes: 64 rounds; two blocks fit in L2 */

/* Round r of `rounds` (at p) takes 8 lines of each half of the next block;
   this prefetches line `pair` of them (0..7) from both halves into L2,
   where the next block lies whole within the rounds. */
static inline __attribute__((always_inline)) void wsync__dprefetch_next(const uint8_t *p, size_t r, size_t rounds,
                                                                       size_t pair)
{
    size_t in = r % (WSYNC__DBLOCK / 1024), line = 8 * in + pair;
    if (r - in + 2 * (WSYNC__DBLOCK / 1024) > rounds) return;
    /* this round's block starts 1024 in bytes back, the next one a block on */
    wsync__prefetch_l2(p, WSYNC__DBLOCK - 1024 * in + 64 * line);
    wsync__prefetch_l2(p, WSYNC__DBLOCK - 1024 * in + WSYNC__DBLOCK / 2 + 64 * line);
}

static void wsync__drounds_sse2(uint64_t acc[8], const uint8_t *p, size_t rounds)
{
    __m128i a[4], sk[4];
    size_t r;
    int s, i;
    const __m128i prime = _mm_set1_epi32((int)WSYNC__D_PRIME32);
    for (i = 0; i < 4; i++) {
        a[i] = _mm_loadu_si128((const __m128i *)(const void *)(acc + 2 * i));
        sk[i] = _mm_loadu_si128((const __m128i *)(const void *)(wsync__dkey + 8 + 2 * i));
    }
    for (r = 0; r < rounds; r++, p += 1024) {
        for (s = 0; s < 16; s++) {
            if (!(s & 1)) wsync__dprefetch_next(p, r, rounds, (size_t)s / 2); /* as in the AVX2 rounds */
            for (i = 0; i < 4; i++) {
                __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(p + 64 * s + 16 * i));
                __m128i key = _mm_loadu_si128((const __m128i *)(const void *)(wsync__dstripe_key[s] + 2 * i));
                __m128i k = _mm_xor_si128(d, key);
                __m128i hi = _mm_shuffle_epi32(k, _MM_SHUFFLE(3, 3, 1, 1));
                a[i] = _mm_add_epi64(a[i], _mm_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2)));
                a[i] = _mm_add_epi64(a[i], _mm_mul_epu32(k, hi));
            }
        }
        for (i = 0; i < 4; i++) {
            __m128i x = _mm_xor_si128(a[i], _mm_srli_epi64(a[i], 47));
            __m128i lo, hi;
            x = _mm_xor_si128(x, sk[i]);
            /* 64x32 multiply: lo32*p + (hi32*p << 32) */
            lo = _mm_mul_epu32(x, prime);
            hi = _mm_mul_epu32(_mm_srli_epi64(x, 32), prime);
            a[i] = _mm_add_epi64(lo, _mm_slli_epi64(hi, 32));
        }
    }
    for (i = 0; i < 4; i++) _mm_storeu_si128((__m128i *)(void *)(acc + 2 * i), a[i]);
}

/* One 32-byte half of a stripe into its accumulator, and the scramble that
   ends a round: the arithmetic of the AVX2 rounds, shared with the diff that
   digests on its loads (wsync__diff_digest_w2_avx2). */
WSYNC__AVX2_INLINE __m256i wsync__dhalf_avx2(__m256i a, __m256i d, const uint64_t *key)
{
    __m256i k = _mm256_xor_si256(d, _mm256_loadu_si256((const __m256i *)(const void *)key));
    __m256i hi = _mm256_shuffle_epi32(k, _MM_SHUFFLE(3, 3, 1, 1));
    a = _mm256_add_epi64(a, _mm256_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_add_epi64(a, _mm256_mul_epu32(k, hi));
}

WSYNC__AVX2_INLINE __m256i wsync__dscramble_avx2(__m256i a, __m256i sk)
{
    const __m256i prime = _mm256_set1_epi32((int)WSYNC__D_PRIME32);
    __m256i x = _mm256_xor_si256(_mm256_xor_si256(a, _mm256_srli_epi64(a, 47)), sk);
    __m256i lo = _mm256_mul_epu32(x, prime), hi = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), prime);
    return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}

WSYNC__AVX2 static void wsync__drounds_avx2(uint64_t acc[8], const uint8_t *p, size_t rounds)
{
    __m256i a[2], sk[2];
    size_t r;
    int s, i;
    for (i = 0; i < 2; i++) {
        a[i] = _mm256_loadu_si256((const __m256i *)(const void *)(acc + 4 * i));
        sk[i] = _mm256_loadu_si256((const __m256i *)(const void *)(wsync__dkey + 8 + 4 * i));
    }
    for (r = 0; r < rounds; r++, p += 1024) {
        for (s = 0; s < 16; s++) {
            if (!(s & 1)) wsync__dprefetch_next(p, r, rounds, (size_t)s / 2);
            for (i = 0; i < 2; i++)
                a[i] = wsync__dhalf_avx2(a[i], _mm256_loadu_si256((const __m256i *)(const void *)(p + 64 * s + 32 * i)),
                                         wsync__dstripe_key[s] + 4 * i);
        }
        for (i = 0; i < 2; i++) a[i] = wsync__dscramble_avx2(a[i], sk[i]);
    }
    for (i = 0; i < 2; i++) _mm256_storeu_si256((__m256i *)(void *)(acc + 4 * i), a[i]);
}
#endif

#if WSYNC__X86
/* The same rounds with all eight lanes in one register. The raw words go
   into a second accumulator, added in before the scramble: each stripe then
   waits on one add, not two, and a sum does not see the order. A stripe
   comes in as two 256-bit loads (WSYNC__LOAD512): with one 512-bit load
   these rounds ran at 0.43-0.61 of memcmp on a Zen 5 core, on the data
   offsets tensors have, against the AVX2 rounds' 0.74-0.83.
   The 16 stripes of a round are written out, with the 16 stripe keys in
   registers, and there is no software prefetch (the hardware's streams
   alone): on an AMD EPYC of family 25 model 17 (Zen 4), 1 GiB at data
   offsets 0, 8 and 16, ratios to memcmp of the same bytes per byte (thread
   CPU time, the median of 24 paired calls), the rounds as a loop with the
   AVX2 rounds' two-stream prefetch (wsync__dprefetch_next) ran at
   0.68-0.83; written out with that prefetch 0.67-0.70; written out
   without it 0.85-0.95; with a prefetch of every line 4 KiB ahead
   0.73-0.83. A round as a loop spends about 20 instructions a stripe on the
   prefetch's addresses and the loop, and the core then runs too few
   stripes ahead to keep the memory busy. */
WSYNC__AVX512 static void wsync__drounds_avx512(uint64_t acc[8], const uint8_t *p, size_t rounds)
{
    __m512i a = _mm512_loadu_si512((const void *)acc), sk = _mm512_loadu_si512((const void *)(wsync__dkey + 8));
    const __m512i prime = _mm512_set1_epi32((int)WSYNC__D_PRIME32);
    __m512i key[16];
    size_t r;
    int s;
    for (s = 0; s < 16; s++) key[s] = _mm512_loadu_si512((const void *)wsync__dstripe_key[s]);
    for (r = 0; r < rounds; r++, p += 1024) {
        __m512i x, hi, raw = _mm512_setzero_si512();
        /* stripe s: the product into a, the raw words into raw; mul_epu32
           reads the low half of each lane. The swap of each 64-bit lane
           pair that sends a raw word to its neighbouring lane is done once
           a round, on the sum (a fixed swap of lanes commutes with lane-wise
           adds): one instruction a stripe fewer. On the Zen 4 core above,
           256 KiB in L2 at data offset 8: 63 GB/s against 47 with the swap
           per stripe; streaming from memory the two ran alike (0.97-1.04
           of each other, paired, load 5.5). */
#define WSYNC__DSTRIPE512(s)                                                                                     \
    do {                                                                                                         \
        __m512i d_ = WSYNC__LOAD512(p + 64 * (s)), k_ = _mm512_xor_si512(d_, key[s]);                            \
        raw = _mm512_add_epi64(raw, d_);                                                                         \
        a = _mm512_add_epi64(a, _mm512_maskz_mul_epu32(0xFF, k_, _mm512_maskz_srli_epi64(0xFF, k_, 32)));        \
    } while (0)
        WSYNC__DSTRIPE512(0);
        WSYNC__DSTRIPE512(1);
        WSYNC__DSTRIPE512(2);
        WSYNC__DSTRIPE512(3);
        WSYNC__DSTRIPE512(4);
        WSYNC__DSTRIPE512(5);
        WSYNC__DSTRIPE512(6);
        WSYNC__DSTRIPE512(7);
        WSYNC__DSTRIPE512(8);
        WSYNC__DSTRIPE512(9);
        WSYNC__DSTRIPE512(10);
        WSYNC__DSTRIPE512(11);
        WSYNC__DSTRIPE512(12);
        WSYNC__DSTRIPE512(13);
        WSYNC__DSTRIPE512(14);
        WSYNC__DSTRIPE512(15);
#undef WSYNC__DSTRIPE512
        a = _mm512_add_epi64(
            a, _mm512_maskz_shuffle_epi32((__mmask16)0xFFFF, raw, (_MM_PERM_ENUM)_MM_SHUFFLE(1, 0, 3, 2)));
        x = _mm512_xor_si512(_mm512_xor_si512(a, _mm512_maskz_srli_epi64(0xFF, a, 47)), sk);
        hi = _mm512_maskz_mul_epu32(0xFF, _mm512_maskz_srli_epi64(0xFF, x, 32), prime);
        a = _mm512_add_epi64(_mm512_maskz_mul_epu32(0xFF, x, prime), _mm512_maskz_slli_epi64(0xFF, hi, 32));
    }
    _mm512_storeu_si512((void *)acc, a);
}
#endif

static uint64_t wsync__davalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= WSYNC__D_P2;
    h ^= h >> 29;
    h *= WSYNC__D_P3;
    h ^= h >> 32;
    return h;
}

static void wsync__drounds(wsync_impl impl, uint64_t acc[8], const uint8_t *p, size_t rounds)
{
    if (!rounds) return;
    switch (impl) {
#if WSYNC__X86
    case WSYNC_IMPL_AVX512: wsync__drounds_avx512(acc, p, rounds); break;
    case WSYNC_IMPL_AVX2: wsync__drounds_avx2(acc, p, rounds); break;
    case WSYNC_IMPL_SSE2: wsync__drounds_sse2(acc, p, rounds); break;
#endif
    default: wsync__drounds_scalar(acc, p, rounds); break;
    }
}

static void wsync__dinit(uint64_t acc[8])
{
    acc[0] = WSYNC__D_P1;
    acc[1] = WSYNC__D_P2;
    acc[2] = WSYNC__D_P3;
    acc[3] = WSYNC__D_PRIME32;
    acc[4] = ~WSYNC__D_P1;
    acc[5] = ~WSYNC__D_P2;
    acc[6] = ~WSYNC__D_P3;
    acc[7] = 0x27D4EB2F165667C5ull;
}

/* The rest after the whole 1 KiB rounds (< 1024 bytes): whole stripes, then
   the last partial stripe zero-padded (always one, even when empty); the
   length mixed in below tells the padding apart. */
static uint64_t wsync__dfinish(const uint64_t acc_in[8], const uint8_t *rest, size_t n, uint64_t len)
{
    uint64_t acc[8], h;
    uint8_t tail[64];
    size_t s;
    int i;
    memcpy(acc, acc_in, sizeof acc);
    for (s = 0; s + 64 <= n; s += 64) wsync__dstripe_scalar(acc, rest + s, wsync__dstripe_key[s / 64]);
    memset(tail, 0, sizeof tail);
    if (n - s) memcpy(tail, rest + s, n - s);
    wsync__dstripe_scalar(acc, tail, wsync__dstripe_key[s / 64]);
    h = len * WSYNC__D_P1;
    for (i = 0; i < 8; i++) {
        uint64_t a = acc[i] ^ wsync__dkey[8 + i];
        h ^= wsync__davalanche(a + (uint64_t)i);
        h = (h << 27 | h >> 37) * WSYNC__D_P2;
    }
    return wsync__davalanche(h);
}

static uint64_t wsync__digest_impl(wsync_impl impl, const void *bytes, size_t len)
{
    const uint8_t *p = (const uint8_t *)bytes;
    uint64_t acc[8];
    size_t rounds = len / 1024;
    wsync__dinit(acc);
    wsync__drounds(impl, acc, p, rounds);
    return wsync__dfinish(acc, p + rounds * 1024, len - rounds * 1024, (uint64_t)len);
}

/* AUTO's digest path, chosen at first use (wsync__simd_choose, below). */
static wsync_impl wsync__digest_best(void);

WSYNC_DEF uint64_t wsync_digest(const void *bytes, size_t len)
{
    return wsync__digest_impl(wsync__digest_best(), bytes, len);
}

static int wsync__impl_available(wsync_impl impl)
{
    switch (impl) {
    case WSYNC_IMPL_AUTO:
    case WSYNC_IMPL_SCALAR: return 1;
#if WSYNC__X86
    case WSYNC_IMPL_SSE2: return 1;
    case WSYNC_IMPL_AVX2: return wsync__has_avx2();
    case WSYNC_IMPL_AVX512: return wsync__has_avx512bw();
#endif
#if WSYNC__NEON
    case WSYNC_IMPL_NEON: return 1;
#endif
    default: return 0;
    }
}

WSYNC_DEF const char *wsync_impl_name(wsync_impl impl)
{
    static const char *names[WSYNC_IMPL_COUNT] = {"auto", "scalar", "sse2", "avx2", "avx512", "neon"};
    return (int)impl >= 0 && impl < WSYNC_IMPL_COUNT ? names[impl] : "unknown";
}

WSYNC_DEF uint64_t wsync_digest_using(wsync_impl impl, const void *bytes, size_t len, int *ok)
{
    /* the digest has no NEON path of its own */
    int avail = wsync__impl_available(impl) != 0 && impl != WSYNC_IMPL_NEON;
    if (ok) *ok = avail;
    if (!avail) return 0;
    return wsync__digest_impl(impl == WSYNC_IMPL_AUTO ? wsync__digest_best() : impl, bytes, len);
}

WSYNC_DEF void wsync_digest_init(wsync_digest_state *s)
{
    wsync__dinit(s->acc);
    s->len = 0;
    s->nbuf = 0;
}

WSYNC_DEF void wsync_digest_update(wsync_digest_state *s, const void *bytes, size_t len)
{
    const uint8_t *p = (const uint8_t *)bytes;
    wsync_impl impl = wsync__digest_best();
    size_t rounds;
    s->len += len;
    if (s->nbuf) {
        size_t take = 1024 - s->nbuf < len ? 1024 - s->nbuf : len;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        len -= take;
        if (s->nbuf < 1024) return;
        wsync__drounds(impl, s->acc, s->buf, 1);
        s->nbuf = 0;
    }
    /* Whole rounds straight from the input; a round that ends the input
       stays buffered only if it is partial (a whole one is final-safe). */
    rounds = len / 1024;
    wsync__drounds(impl, s->acc, p, rounds);
    p += rounds * 1024;
    len -= rounds * 1024;
    if (len) memcpy(s->buf, p, len);
    s->nbuf = len;
}

WSYNC_DEF uint64_t wsync_digest_final(const wsync_digest_state *s)
{
    return wsync__dfinish(s->acc, s->buf, s->nbuf, s->len);
}

/* Turns a mask with one bit per differing byte at byte offset `off` into
   element positions. Elements are aligned to the 64-byte window because
   `off` is a multiple of 64 and width divides 64. */
static size_t wsync__diff_emit(uint64_t ne, size_t off, unsigned shift, uint32_t *pos, size_t count)
{
    uint64_t m = ne;
    switch (shift) {
    case 0: break;
    case 1: m = (m | (m >> 1)) & 0x5555555555555555ull; break;
    case 2: m |= m >> 1; m |= m >> 2; m &= 0x1111111111111111ull; break;
    default: m |= m >> 1; m |= m >> 2; m |= m >> 4; m &= 0x0101010101010101ull; break;
    }
    while (m) {
        pos[count++] = (uint32_t)((off + wsync__ctz64(m)) >> shift);
        m &= m - 1;
    }
    return count;
}

static size_t wsync__diff_tail(const uint8_t *a, const uint8_t *b, size_t from, size_t nbytes,
                               unsigned width, unsigned shift, uint32_t *pos, size_t count)
{
    size_t i;
    for (i = from; i < nbytes; i += width)
        if (memcmp(a + i, b + i, width) != 0) pos[count++] = (uint32_t)(i >> shift);
    return count;
}

static unsigned wsync__width_shift(unsigned width)
{
    return width == 1 ? 0 : width == 2 ? 1 : width == 4 ? 2 : 3;
}

WSYNC_DEF size_t wsync_diff_scalar(const void *a, const void *b, size_t n, unsigned width, uint32_t *pos)
{
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    size_t i, count = 0;
    WSYNC_ASSERT(width == 1 || width == 2 || width == 4 || width == 8);
    for (i = 0; i < n; i++)
        if (memcmp(x + i * width, y + i * width, width) != 0) pos[count++] = (uint32_t)i;
    return count;
}

/* Portable fast path: 64 bytes at a time as eight words; only a window
   with a difference is looked at byte by byte. */
static size_t wsync__diff_words(const uint8_t *a, const uint8_t *b, size_t nbytes, unsigned shift,
                                uint32_t *pos)
{
    size_t i, count = 0;
    int w;
    for (i = 0; i + 64 <= nbytes; i += 64) {
        uint64_t x[8], any = 0;
        for (w = 0; w < 8; w++) any |= x[w] = wsync__le64(a + i + 8 * w) ^ wsync__le64(b + i + 8 * w);
        if (any) {
            uint64_t ne = 0;
            for (w = 0; w < 8; w++) {
                uint64_t v = x[w], bytes = 0;
                int k;
                for (k = 0; k < 8; k++) bytes |= (uint64_t)(((v >> (8 * k)) & 0xFF) != 0) << k;
                ne |= bytes << (8 * w);
            }
            count = wsync__diff_emit(ne, i, shift, pos, count);
        }
    }
    return wsync__diff_tail(a, b, i, nbytes, 1u << shift, shift, pos, count);
}

#if WSYNC__X86
static size_t wsync__diff_sse2(const uint8_t *a, const uint8_t *b, size_t nbytes, unsigned shift,
                               uint32_t *pos)
{
    size_t i, count = 0;
    for (i = 0; i + 64 <= nbytes; i += 64) {
        __m128i e0 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(a + i)),
                                    _mm_loadu_si128((const __m128i *)(const void *)(b + i)));
        __m128i e1 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(a + i + 16)),
                                    _mm_loadu_si128((const __m128i *)(const void *)(b + i + 16)));
        __m128i e2 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(a + i + 32)),
                                    _mm_loadu_si128((const __m128i *)(const void *)(b + i + 32)));
        __m128i e3 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(a + i + 48)),
                                    _mm_loadu_si128((const __m128i *)(const void *)(b + i + 48)));
        __m128i all = _mm_and_si128(_mm_and_si128(e0, e1), _mm_and_si128(e2, e3));
        if (_mm_movemask_epi8(all) != 0xFFFF) {
            uint64_t eq = (uint64_t)(uint16_t)_mm_movemask_epi8(e0) |
                          (uint64_t)(uint16_t)_mm_movemask_epi8(e1) << 16 |
                          (uint64_t)(uint16_t)_mm_movemask_epi8(e2) << 32 |
                          (uint64_t)(uint16_t)_mm_movemask_epi8(e3) << 48;
            count = wsync__diff_emit(~eq, i, shift, pos, count);
        }
    }
    return wsync__diff_tail(a, b, i, nbytes, 1u << shift, shift, pos, count);
}

/* Branch-free emission: at one percent of changed elements most 64-element
   windows hold a change at an unpredictable place, so a test per window and
   a loop over its mask bits mispredict about once a window. Instead the
   first four set bits of the window's element mask are stored whether or
   not they exist (an empty mask stores `base + 63`, overwritten later) and
   the count advances by the popcount; only a window with more than four
   changes loops. The stores stay inside pos[0, n): the count never exceeds
   the index of the window's first element and a window holds at least 16
   elements. */
WSYNC__AVX2_POPCNT_INLINE size_t wsync__diff_put4(uint64_t m, uint32_t base, uint32_t *pos, size_t count)
{
    const uint64_t top = 1ull << 63;
    uint64_t t = m;
    unsigned c = (unsigned)_mm_popcnt_u64(m);
    pos[count] = base + wsync__ctz64(t | top);
    t &= t - 1;
    pos[count + 1] = base + wsync__ctz64(t | top);
    t &= t - 1;
    pos[count + 2] = base + wsync__ctz64(t | top);
    t &= t - 1;
    pos[count + 3] = base + wsync__ctz64(t | top);
    if (c > 4) {
        size_t k = count + 4;
        t &= t - 1;
        while (t) {
            pos[k++] = base + wsync__ctz64(t);
            t &= t - 1;
        }
    }
    return count + c;
}

/* One bit per differing element of a 128-byte window held in x0..x3 (one
   image) and y0..y3 (the other): two masks of 64 for 1-byte elements, m[0]
   for the first 64 bytes. (Named vectors, not arrays: gcc -O2 without -march
   keeps arrays on the stack, and every mask then goes through memory.) */
WSYNC__AVX2_INLINE void wsync__diff_mask_v(__m256i x0, __m256i x1, __m256i x2, __m256i x3, __m256i y0, __m256i y1,
                                       __m256i y2, __m256i y3, unsigned shift, uint64_t m[2])
{
    switch (shift) {
    case 0:
        m[0] = ~((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x0, y0)) |
                 (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x1, y1)) << 32);
        m[1] = ~((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x2, y2)) |
                 (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x3, y3)) << 32);
        break;
    case 1: {
        /* packs interleaves the 128-bit lanes; the permute puts them back */
        __m256i p01 = _mm256_packs_epi16(_mm256_cmpeq_epi16(x0, y0), _mm256_cmpeq_epi16(x1, y1));
        __m256i p23 = _mm256_packs_epi16(_mm256_cmpeq_epi16(x2, y2), _mm256_cmpeq_epi16(x3, y3));
        m[0] = ~((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_permute4x64_epi64(p01, 0xD8)) |
                 (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_permute4x64_epi64(p23, 0xD8)) << 32);
        break;
    }
    case 2:
        m[0] = 0xFFFFFFFFull & ~((uint64_t)(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x0, y0))) |
                                 (uint64_t)(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x1, y1))) << 8 |
                                 (uint64_t)(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x2, y2))) << 16 |
                                 (uint64_t)(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x3, y3))) << 24);
        break;
    default:
        m[0] = 0xFFFFull & ~((uint64_t)(unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x0, y0))) |
                             (uint64_t)(unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x1, y1))) << 4 |
                             (uint64_t)(unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x2, y2))) << 8 |
                             (uint64_t)(unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x3, y3))) << 12);
        break;
    }
}

#define WSYNC__LOAD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))

/* The same, loading the window from a and b. */
WSYNC__AVX2_INLINE void wsync__diff_mask128(const uint8_t *a, const uint8_t *b, unsigned shift, uint64_t m[2])
{
    wsync__diff_mask_v(WSYNC__LOAD256(a), WSYNC__LOAD256(a + 32), WSYNC__LOAD256(a + 64), WSYNC__LOAD256(a + 96),
                       WSYNC__LOAD256(b), WSYNC__LOAD256(b + 32), WSYNC__LOAD256(b + 64), WSYNC__LOAD256(b + 96),
                       shift, m);
}

WSYNC__AVX2_POPCNT static size_t wsync__diff_avx2(const uint8_t *a, const uint8_t *b, size_t nbytes,
                                                  unsigned shift, uint32_t *pos)
{
    size_t i, count = 0;
    /* two windows compared before either is stored: more loads in flight */
    for (i = 0; i + 256 <= nbytes; i += 256) {
        uint64_t m[2], n[2];
        wsync__prefetch_diff256(a + i, b + i); /* a kilobyte ahead into L2 */
        wsync__diff_mask128(a + i, b + i, shift, m);
        wsync__diff_mask128(a + i + 128, b + i + 128, shift, n);
        count = wsync__diff_put4(m[0], (uint32_t)(i >> shift), pos, count);
        if (shift == 0) count = wsync__diff_put4(m[1], (uint32_t)(i + 64), pos, count);
        count = wsync__diff_put4(n[0], (uint32_t)((i + 128) >> shift), pos, count);
        if (shift == 0) count = wsync__diff_put4(n[1], (uint32_t)(i + 192), pos, count);
    }
    for (; i + 128 <= nbytes; i += 128) {
        uint64_t m[2];
        wsync__diff_mask128(a + i, b + i, shift, m);
        count = wsync__diff_put4(m[0], (uint32_t)(i >> shift), pos, count);
        if (shift == 0) count = wsync__diff_put4(m[1], (uint32_t)(i + 64), pos, count);
    }
    if (i < nbytes) {
        /* finish whole 64-byte windows with SSE2, the rest bytewise */
        size_t done = nbytes - i >= 64 ? ((nbytes - i) / 64) * 64 : 0, k, c;
        c = wsync__diff_sse2(a + i, b + i, done, shift, pos + count);
        for (k = 0; k < c; k++) pos[count + k] += (uint32_t)(i >> shift);
        count += c;
        count = wsync__diff_tail(a, b, i + done, nbytes, 1u << shift, shift, pos, count);
    }
    return count;
}

#ifndef WSYNC_NO_ENCODE
/* The diff of 2-byte elements over whole 1 KiB rounds with the digest
   rounds of b (wsync__drounds_avx2's arithmetic) run on the same loads: the
   diff waits on memory and the digest's arithmetic fits in that wait, so
   the new image's digest costs no pass of its own. The lanes add in another
   order than in the plain rounds, which a sum does not see. acc is the
   digest state before and after; the window's mask and the digest's
   arithmetic are the plain diff's and rounds' own helpers. */
WSYNC__AVX2_POPCNT static size_t wsync__diff_digest_w2_avx2(const uint8_t *a, const uint8_t *b, size_t rounds,
                                                            uint32_t *pos, uint64_t acc[8])
{
    __m256i h[2], sk[2];
    size_t r, count = 0;
    int s, k;
    for (k = 0; k < 2; k++) {
        h[k] = _mm256_loadu_si256((const __m256i *)(const void *)(acc + 4 * k));
        sk[k] = _mm256_loadu_si256((const __m256i *)(const void *)(wsync__dkey + 8 + 4 * k));
    }
    for (r = 0; r < rounds; r++) {
        for (s = 0; s < 16; s += 2) {
            size_t off = 1024 * r + 64 * (size_t)s;
            __m256i y0 = WSYNC__LOAD256(b + off), y1 = WSYNC__LOAD256(b + off + 32);
            __m256i y2 = WSYNC__LOAD256(b + off + 64), y3 = WSYNC__LOAD256(b + off + 96);
            uint64_t m[2];
            wsync__prefetch_l2(a + off, 1024);
            wsync__prefetch_l2(a + off, 1024 + 64);
            wsync__prefetch_l2(b + off, 1024);
            wsync__prefetch_l2(b + off, 1024 + 64);
            wsync__diff_mask_v(WSYNC__LOAD256(a + off), WSYNC__LOAD256(a + off + 32), WSYNC__LOAD256(a + off + 64),
                               WSYNC__LOAD256(a + off + 96), y0, y1, y2, y3, 1, m);
            count = wsync__diff_put4(m[0], (uint32_t)(off >> 1), pos, count);
            /* the window is stripes s and s + 1 of the round, two halves each */
            h[0] = wsync__dhalf_avx2(h[0], y0, wsync__dstripe_key[s]);
            h[1] = wsync__dhalf_avx2(h[1], y1, wsync__dstripe_key[s] + 4);
            h[0] = wsync__dhalf_avx2(h[0], y2, wsync__dstripe_key[s + 1]);
            h[1] = wsync__dhalf_avx2(h[1], y3, wsync__dstripe_key[s + 1] + 4);
        }
        for (k = 0; k < 2; k++) h[k] = wsync__dscramble_avx2(h[k], sk[k]);
    }
    for (k = 0; k < 2; k++) _mm256_storeu_si256((__m256i *)(void *)(acc + 4 * k), h[k]);
    return count;
}
#endif /* WSYNC_NO_ENCODE */


/* The AVX-512 diff of 4- and 8-byte elements, and of 2-byte ones where the
   CPU lacks AVX512VL (1- and 2-byte elements otherwise: below).
   Branch-free: at one percent of changed elements nearly every window holds
   a change at an unpredictable place, so instead of testing and looping over
   mask bits, every 16 lanes of element indices are compressed by the
   "differs" mask and stored whole; the count advances by the popcount. A
   16-entry store at pos + count stays inside pos[0, n) because count never
   exceeds the index of the window's first element and a window holds at
   least 16 elements (8-byte elements: 8, stored 8 at a time). */
#define WSYNC__AVX512_EMIT(mask16, idx)                                                     \
    do {                                                                                   \
        __mmask16 m_ = (__mmask16)(mask16);                                                \
        _mm512_storeu_si512((void *)(pos + count), _mm512_maskz_compress_epi32(m_, (idx))); \
        count += (size_t)__builtin_popcount((unsigned)m_);                                 \
    } while (0)

WSYNC__AVX512 static size_t wsync__diff_avx512(const uint8_t *a, const uint8_t *b, size_t nbytes,
                                               unsigned shift, uint32_t *pos)
{
    size_t i, count = 0;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i sixteen = _mm512_set1_epi32(16);
    for (i = 0; i + 64 <= nbytes; i += 64) {
        __m512i x, y, idx;
        /* a kilobyte ahead into L2, as in the AVX2 diff; each 64 bytes as
           two 256-bit loads (WSYNC__LOAD512) */
        wsync__prefetch_l2(a + i, 1024);
        wsync__prefetch_l2(b + i, 1024);
        x = WSYNC__LOAD512(a + i);
        y = WSYNC__LOAD512(b + i);
        idx = _mm512_add_epi32(lane, _mm512_set1_epi32((int)(uint32_t)(i >> shift)));
        switch (shift) {
        case 0: {
            uint64_t m = _mm512_cmpneq_epi8_mask(x, y);
            WSYNC__AVX512_EMIT(m, idx);
            idx = _mm512_add_epi32(idx, sixteen);
            WSYNC__AVX512_EMIT(m >> 16, idx);
            idx = _mm512_add_epi32(idx, sixteen);
            WSYNC__AVX512_EMIT(m >> 32, idx);
            idx = _mm512_add_epi32(idx, sixteen);
            WSYNC__AVX512_EMIT(m >> 48, idx);
            break;
        }
        case 1: {
            uint32_t m = _mm512_cmpneq_epi16_mask(x, y);
            WSYNC__AVX512_EMIT(m, idx);
            WSYNC__AVX512_EMIT(m >> 16, _mm512_add_epi32(idx, sixteen));
            break;
        }
        case 2: WSYNC__AVX512_EMIT(_mm512_cmpneq_epi32_mask(x, y), idx); break;
        default: {
            /* 8 elements per window: store 8 entries, not 16, or the last
               window could write past pos[n - 1] */
            __mmask16 m = (__mmask16)_mm512_cmpneq_epi64_mask(x, y);
            uint32_t tmp[16];
            _mm512_storeu_si512((void *)tmp, _mm512_maskz_compress_epi32(m, idx));
            memcpy(pos + count, tmp, 8 * sizeof *tmp);
            count += (size_t)__builtin_popcount((unsigned)m);
            break;
        }
        }
    }
    return wsync__diff_tail(a, b, i, nbytes, 1u << shift, shift, pos, count);
}
#undef WSYNC__AVX512_EMIT

/* bf16/f16 (2-byte elements) where the CPU has AVX512VL: each 32 bytes
   compared by a 256-bit vpcmpw straight into a mask register, two lines'
   masks joined into one 64-bit mask (64 elements), and the positions
   emitted as the AVX2 diff emits them (wsync__diff_put4: four stores and a
   popcount, a loop only past four changes). The same loads, prefetch and
   emission as the AVX2 diff, without its packs, permute and movemask.
   Before, with VBMI2, each line's positions were a 16-bit compress of the
   line's mask, widened, rebased and stored as 16 entries: on an AMD EPYC
   of family 25 model 17 (Zen 4), 64 MiB calls over 1 GiB at data offsets
   0, 8 and 16, thread CPU time, the median of 48 or 64 calls paired with an
   AVX2 call in the same round (every path over every piece), three sets of
   three runs: the compress at 0.98-1.00 of the AVX2 diff's speed (each
   set's mean), this at 1.00-1.01; the diff is bound by memory there, so
   the paths differ by little. */
WSYNC__AVX512VL_POPCNT static inline __attribute__((always_inline)) __mmask32 wsync__diff_mask64_w2(const uint8_t *a,
                                                                                                   const uint8_t *b)
{
    __mmask16 k0 = _mm256_cmpneq_epi16_mask(WSYNC__LOAD256(a), WSYNC__LOAD256(b));
    __mmask16 k1 = _mm256_cmpneq_epi16_mask(WSYNC__LOAD256(a + 32), WSYNC__LOAD256(b + 32));
    return _mm512_kunpackw((__mmask32)k1, (__mmask32)k0);
}

/* 1-byte elements (fp8, int8): each line compared by one 512-bit vpcmpb
   (on two 256-bit loads, WSYNC__LOAD512) into a 64-bit mask, its positions
   emitted by wsync__diff_put4. The compress above took four compresses and
   four 64-byte stores a line: on the Zen 4 core, as above (48 calls paired
   with AVX2's, two runs at offsets 0, 8 and 16), the compress ran at
   0.85-0.95 of the AVX2 diff's speed, this at 1.00-1.12. */
WSYNC__AVX512_POPCNT static size_t wsync__diff_avx512_w1(const uint8_t *a, const uint8_t *b, size_t nbytes,
                                                        uint32_t *pos)
{
    size_t i, count = 0;
    for (i = 0; i + 256 <= nbytes; i += 256) {
        /* four lines compared before any is stored */
        uint64_t m0, m1, m2, m3;
        wsync__prefetch_diff256(a + i, b + i); /* as in the AVX2 diff */
        m0 = (uint64_t)_mm512_cmpneq_epi8_mask(WSYNC__LOAD512(a + i), WSYNC__LOAD512(b + i));
        m1 = (uint64_t)_mm512_cmpneq_epi8_mask(WSYNC__LOAD512(a + i + 64), WSYNC__LOAD512(b + i + 64));
        m2 = (uint64_t)_mm512_cmpneq_epi8_mask(WSYNC__LOAD512(a + i + 128), WSYNC__LOAD512(b + i + 128));
        m3 = (uint64_t)_mm512_cmpneq_epi8_mask(WSYNC__LOAD512(a + i + 192), WSYNC__LOAD512(b + i + 192));
        count = wsync__diff_put4(m0, (uint32_t)i, pos, count);
        count = wsync__diff_put4(m1, (uint32_t)(i + 64), pos, count);
        count = wsync__diff_put4(m2, (uint32_t)(i + 128), pos, count);
        count = wsync__diff_put4(m3, (uint32_t)(i + 192), pos, count);
    }
    for (; i + 64 <= nbytes; i += 64)
        count = wsync__diff_put4((uint64_t)_mm512_cmpneq_epi8_mask(WSYNC__LOAD512(a + i), WSYNC__LOAD512(b + i)),
                                 (uint32_t)i, pos, count);
    return wsync__diff_tail(a, b, i, nbytes, 1, 0, pos, count);
}

WSYNC__AVX512VL_POPCNT static size_t wsync__diff_avx512_w2(const uint8_t *a, const uint8_t *b, size_t nbytes,
                                                          uint32_t *pos)
{
    size_t i, count = 0;
    for (i = 0; i + 256 <= nbytes; i += 256) {
        /* two 128-byte windows compared before either is stored */
        __mmask64 m, n;
        wsync__prefetch_diff256(a + i, b + i); /* as in the AVX2 diff */
        m = _mm512_kunpackd((__mmask64)wsync__diff_mask64_w2(a + i + 64, b + i + 64),
                            (__mmask64)wsync__diff_mask64_w2(a + i, b + i));
        n = _mm512_kunpackd((__mmask64)wsync__diff_mask64_w2(a + i + 192, b + i + 192),
                            (__mmask64)wsync__diff_mask64_w2(a + i + 128, b + i + 128));
        count = wsync__diff_put4((uint64_t)m, (uint32_t)(i >> 1), pos, count);
        count = wsync__diff_put4((uint64_t)n, (uint32_t)((i + 128) >> 1), pos, count);
    }
    /* whole lines: 32 elements a window, which put4 allows (at least 16) */
    for (; i + 64 <= nbytes; i += 64)
        count = wsync__diff_put4((uint64_t)wsync__diff_mask64_w2(a + i, b + i), (uint32_t)(i >> 1), pos, count);
    return wsync__diff_tail(a, b, i, nbytes, 2, 1, pos, count);
}
#endif

#if WSYNC__NEON
static size_t wsync__diff_neon(const uint8_t *a, const uint8_t *b, size_t nbytes, unsigned shift,
                               uint32_t *pos)
{
    size_t i, count = 0;
    for (i = 0; i + 64 <= nbytes; i += 64) {
        uint8x16_t x0 = veorq_u8(vld1q_u8(a + i), vld1q_u8(b + i));
        uint8x16_t x1 = veorq_u8(vld1q_u8(a + i + 16), vld1q_u8(b + i + 16));
        uint8x16_t x2 = veorq_u8(vld1q_u8(a + i + 32), vld1q_u8(b + i + 32));
        uint8x16_t x3 = veorq_u8(vld1q_u8(a + i + 48), vld1q_u8(b + i + 48));
        if (vmaxvq_u8(vorrq_u8(vorrq_u8(x0, x1), vorrq_u8(x2, x3)))) {
            count = wsync__diff_tail(a, b, i, i + 64, 1u << shift, shift, pos, count);
        }
    }
    return wsync__diff_tail(a, b, i, nbytes, 1u << shift, shift, pos, count);
}
#endif

/* The diff on path impl (not AUTO; one the CPU has), nbytes of each image. */
static size_t wsync__diff_run(wsync_impl impl, const uint8_t *x, const uint8_t *y, size_t nbytes, unsigned shift,
                              uint32_t *pos)
{
    switch (impl) {
#if WSYNC__X86
    case WSYNC_IMPL_AVX512:
        if (shift == 0) return wsync__diff_avx512_w1(x, y, nbytes, pos);
        if (shift == 1 && wsync__has_avx512vl()) return wsync__diff_avx512_w2(x, y, nbytes, pos);
        return wsync__diff_avx512(x, y, nbytes, shift, pos);
    case WSYNC_IMPL_AVX2: return wsync__diff_avx2(x, y, nbytes, shift, pos);
    case WSYNC_IMPL_SSE2: return wsync__diff_sse2(x, y, nbytes, shift, pos);
#endif
#if WSYNC__NEON
    case WSYNC_IMPL_NEON: return wsync__diff_neon(x, y, nbytes, shift, pos);
#endif
    default: return wsync__diff_words(x, y, nbytes, shift, pos);
    }
}

WSYNC_DEF size_t wsync_diff_using(wsync_impl impl, const void *a, const void *b, size_t n,
                                  unsigned width, uint32_t *pos, int *ok)
{
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    unsigned shift = wsync__width_shift(width);
    size_t nbytes = n << shift;
    int avail = wsync__impl_available(impl) != 0;
    WSYNC_ASSERT(width == 1 || width == 2 || width == 4 || width == 8);
    if (ok) *ok = avail;
    if (!avail) return 0;
    return wsync__diff_run(impl == WSYNC_IMPL_AUTO ? wsync_diff_impl() : impl, x, y, nbytes, shift, pos);
}

WSYNC_DEF size_t wsync_diff(const void *a, const void *b, size_t n, unsigned width, uint32_t *pos)
{
    return wsync_diff_using(WSYNC_IMPL_AUTO, a, b, n, width, pos, NULL);
}

/* ---- AUTO: one path per operation, chosen once per process ---- */

/* [0] the diff's, [1] the digest's: 0 (WSYNC_IMPL_AUTO) until chosen. */
static int wsync__simd_chosen[2];

static int wsync__choice_load(int *p)
{
#if defined(__GNUC__)
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
    return *(volatile int *)p;
#endif
}

/* Publishes v unless a choice is there already; returns the one that stays. */
static int wsync__choice_publish(int *p, int v)
{
#if defined(__GNUC__)
    int expected = 0;
    return __atomic_compare_exchange_n(p, &expected, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ? v : expected;
#else
    *(volatile int *)p = v; /* no SIMD paths without GNU C: every thread writes the same */
    return v;
#endif
}

/* The path named by environment variable `var`, or AUTO when unset or when
   this build or CPU lacks it (or, for the digest, has no such path). */
static wsync_impl wsync__impl_from_env(const char *var, int digest)
{
    const char *v = getenv(var);
    int i;
    if (!v) return WSYNC_IMPL_AUTO;
    for (i = WSYNC_IMPL_SCALAR; i < WSYNC_IMPL_COUNT; i++)
        if (strcmp(v, wsync_impl_name((wsync_impl)i)) == 0)
            return wsync__impl_available((wsync_impl)i) && !(digest && i == WSYNC_IMPL_NEON) ? (wsync_impl)i
                                                                                                : WSYNC_IMPL_AUTO;
    return WSYNC_IMPL_AUTO;
}

/* The widest path the CPU has: the choice without a measurement. */
static wsync_impl wsync__impl_widest(int digest)
{
#if WSYNC__X86
    (void)digest;
    return wsync__has_avx512bw() ? WSYNC_IMPL_AVX512 : wsync__has_avx2() ? WSYNC_IMPL_AVX2 : WSYNC_IMPL_SSE2;
#elif WSYNC__NEON
    return digest ? WSYNC_IMPL_SCALAR : WSYNC_IMPL_NEON;
#else
    (void)digest;
    return WSYNC_IMPL_SCALAR;
#endif
}

#if WSYNC__X86
#define WSYNC__PROBE_SMALL 65536u               /* bytes of each image in the L2 pass */
#define WSYNC__PROBE_LARGE (2u * 1024u * 1024u) /* bytes of each image in the passes from memory */
#define WSYNC__PROBE_ROUNDS 9                   /* rounds of one pass from memory */
/* The probe's block (wsync__probe_images): two images, each with a line
   of slack for the offsets, and a position per element. */
#define WSYNC__PROBE_MEM (4u * WSYNC__PROBE_LARGE + 256u)
/* A narrower path must be this much faster than the path it replaces
   (WSYNC__PROBE_WIN_NUM / WSYNC__PROBE_WIN_DEN = 1.4x) in a majority of
   one pass's rounds. */
#define WSYNC__PROBE_WIN_NUM 7u
#define WSYNC__PROBE_WIN_DEN 5u

/* Evicts n bytes at p from every cache level, so that the next pass reads
   them from memory: with CLFLUSHOPT where the CPU has it (CPUID 7.0 EBX
   bit 23), else CLFLUSH. CLFLUSH is ordered against every other CLFLUSH,
   so one runs at a time; on an Intel Xeon of family 6 model 207 (a KVM
   guest) that made the probe's flushes about 0.5 s of its first use. */
static int wsync__has_clflushopt(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1u);
}
__attribute__((target("clflushopt"))) static void wsync__probe_flush_opt(const uint8_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i += 64) _mm_clflushopt((void *)(uintptr_t)(p + i));
    _mm_mfence();
}
static void wsync__probe_flush(const uint8_t *p, size_t n)
{
    size_t i;
    if (wsync__has_clflushopt()) { /* a CPUID per flush: microseconds, against 4 MiB flushed */
        wsync__probe_flush_opt(p, n);
        return;
    }
    for (i = 0; i < n; i += 64) _mm_clflush((const void *)(p + i));
    _mm_mfence();
}

/* One timed call of path cand for op (0 diff, 1 digest) over `bytes` of
   each image; from memory if `cold`. */
static uint64_t wsync__probe_time(int op, wsync_impl cand, const uint8_t *a, const uint8_t *b, size_t bytes,
                                  uint32_t *pos, int cold, volatile uint64_t *sink)
{
    uint64_t t0;
    if (cold) wsync__probe_flush(a, 2 * bytes + 64); /* b follows a, a line on */
    t0 = wsync__ticks();
    if (op == 0)
        *sink += wsync__diff_run(cand, a, b, bytes, 1, pos);
    else
        *sink += wsync__digest_impl(cand, a, 2 * bytes);
    return wsync__ticks() - t0;
}

/* The rule on one pass's timings: t[k][r] the ticks of candidate k in
   round r, candidates widest first (k = 0), in[k] whether k was timed (the
   widest always is). Returns the candidate chosen: the widest, unless a
   narrower one took at most 1/1.4 of its time in a majority of the rounds
   (the median round's ratio at least 1.4); then the same test of the paths
   narrower still against that one. The ratios are of the same round's
   calls, made one right after the other, so that load elsewhere in that
   round hits both alike. */
static int wsync__simd_rule(int nc, const int *in, const uint64_t t[][WSYNC__PROBE_ROUNDS])
{
    int pick = 0, k, r;
    for (k = 1; k < nc; k++) {
        int wins = 0;
        if (!in[k]) continue;
        for (r = 0; r < WSYNC__PROBE_ROUNDS; r++)
            if (WSYNC__PROBE_WIN_DEN * t[pick][r] >= WSYNC__PROBE_WIN_NUM * t[k][r]) wins++;
        if (2 * wins > WSYNC__PROBE_ROUNDS) pick = k;
    }
    return pick;
}

/* One pass from memory: WSYNC__PROBE_ROUNDS rounds, each timing every
   candidate in[op][k] once per op, in turn (the order reversed every other
   round), each call on images evicted from the caches first; the ticks into
   t[op][k][round] (0 for a candidate not timed). */
static void wsync__probe_pass(const wsync_impl *cand, int nc, int in[2][4], const uint8_t *a, const uint8_t *b,
                              uint32_t *pos, volatile uint64_t *sink, uint64_t t[2][4][WSYNC__PROBE_ROUNDS])
{
    int r, j, op;
    for (r = 0; r < WSYNC__PROBE_ROUNDS; r++)
        for (j = 0; j < nc; j++) {
            int k = r & 1 ? nc - 1 - j : j;
            for (op = 0; op < 2; op++)
                t[op][k][r] = in[op][k] ? wsync__probe_time(op, cand[k], a + 8 * (r & 1), b + 8 * (r & 1),
                                                            WSYNC__PROBE_LARGE, pos, 1, sink)
                                        : 0;
        }
}

/* A pass, then the rule for each op into pick[op]. */
static void wsync__probe_decide(const wsync_impl *cand, int nc, int in[2][4], const uint8_t *a, const uint8_t *b,
                                uint32_t *pos, volatile uint64_t *sink, int pick[2])
{
    uint64_t t[2][4][WSYNC__PROBE_ROUNDS];
    int op;
    wsync__probe_pass(cand, nc, in, a, b, pos, sink, t);
    for (op = 0; op < 2; op++) pick[op] = wsync__simd_rule(nc, in[op], (const uint64_t(*)[WSYNC__PROBE_ROUNDS])t[op]);
}

/* The candidates, widest first, into cand; returns how many. */
static int wsync__probe_candidates(wsync_impl cand[4])
{
    int nc = 0;
    if (wsync__has_avx512bw()) cand[nc++] = WSYNC_IMPL_AVX512;
    if (wsync__has_avx2()) cand[nc++] = WSYNC_IMPL_AVX2;
    cand[nc++] = WSYNC_IMPL_SSE2;
    cand[nc++] = WSYNC_IMPL_SCALAR;
    return nc;
}

/* The probe's images in mem (WSYNC__PROBE_MEM bytes): a, 8 bytes past
   mem's first 64-byte boundary, then b a line after a's end (a with 1% of
   its 2-byte elements changed at random places, as after a training step),
   then room for a position per element. Each image is a line longer than
   WSYNC__PROBE_LARGE, so that a pass reads from a + 8 (16 past the
   boundary) as well as from a: the offsets tensors have (a safetensors
   file's data typically sits 8 past a boundary, malloc's large blocks 16),
   not the allocator's (glibc's large blocks sit 16 past a page, other
   allocators' on a line or a page). The digest's 2 * WSYNC__PROBE_LARGE
   bytes run from a into b. */
static void wsync__probe_images(uint8_t *mem, uint8_t **a, uint8_t **b, uint32_t **pos)
{
    size_t i, nchange = WSYNC__PROBE_LARGE / 2 / 100, n = WSYNC__PROBE_LARGE + 64;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    uint8_t *base = mem + (64 - (uintptr_t)mem % 64) % 64;
    *a = base + 8;
    *b = *a + n;
    *pos = (uint32_t *)(void *)(base + 2 * n + 64);
    for (i = 0; i < n; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(*a + i, &x, 8);
    }
    memcpy(*b, *a, n);
    for (i = 0; i < nchange; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        (*b)[2 * (size_t)(x % (WSYNC__PROBE_LARGE / 2))] ^= 1;
    }
}

/* Which candidates the passes from memory time, into in[op][k]: the widest,
   and each narrower one within 1.5x of the widest's time in L2 (best of 3
   after an untimed call: the code in, the wide units awake). It spares the
   passes the paths far behind (scalar, mostly): one 1.5x slower in cache
   is not 1.4x faster from memory. */
static void wsync__probe_filter(const wsync_impl *cand, int nc, const uint8_t *a, const uint8_t *b, uint32_t *pos,
                                volatile uint64_t *sink, int in[2][4])
{
    uint64_t l2[2][4];
    int k, r, op;
    for (op = 0; op < 2; op++)
        for (k = 0; k < nc; k++) {
            l2[op][k] = UINT64_MAX;
            (void)wsync__probe_time(op, cand[k], a, b, WSYNC__PROBE_SMALL, pos, 0, sink);
        }
    for (r = 0; r < 3; r++)
        for (k = 0; k < nc; k++)
            for (op = 0; op < 2; op++) {
                uint64_t t = wsync__probe_time(op, cand[k], a, b, WSYNC__PROBE_SMALL, pos, 0, sink);
                if (t < l2[op][k]) l2[op][k] = t;
            }
    for (op = 0; op < 2; op++)
        for (k = 0; k < nc; k++) in[op][k] = k == 0 || 2 * l2[op][k] <= 3 * l2[op][0];
}

/* Writes AUTO's diff path to out[0] and digest path to out[1] by the rule
   wsync_diff_impl's comment states: the widest path the CPU has, unless two
   passes from memory, one after the other, each find the same narrower
   one clearly faster (wsync__simd_rule). */
static void wsync__simd_measure(wsync_impl out[2])
{
    wsync_impl cand[4];
    int nc = wsync__probe_candidates(cand), op, in[2][4], first[2], again[2];
    volatile uint64_t sink = 0;
    uint8_t *mem, *a, *b;
    uint32_t *pos;
    out[0] = wsync__impl_widest(0); /* cand[0] */
    out[1] = wsync__impl_widest(1);
    mem = (uint8_t *)WSYNC_MALLOC(WSYNC__PROBE_MEM);
    if (!mem) return;
    wsync__probe_images(mem, &a, &b, &pos);
    wsync__probe_filter(cand, nc, a, b, pos, &sink, in);
    wsync__probe_decide(cand, nc, in, a, b, pos, &sink, first);
    if (first[0] || first[1]) {
        wsync__probe_decide(cand, nc, in, a, b, pos, &sink, again);
        for (op = 0; op < 2; op++)
            if (first[op] == again[op]) out[op] = cand[first[op]];
    }
    WSYNC_FREE(mem);
    (void)sink;
}
#endif

/* Makes (or finds) the choice for operation op (0 diff, 1 digest). */
static wsync_impl wsync__simd_choose(int op)
{
    int got = wsync__choice_load(&wsync__simd_chosen[op]);
    wsync_impl want[2];
    if (got) return (wsync_impl)got;
    want[0] = wsync__impl_from_env("WSYNC_DIFF_IMPL", 0);
    want[1] = wsync__impl_from_env("WSYNC_DIGEST_IMPL", 1);
    if (!want[0]) want[0] = wsync__impl_from_env("WSYNC_SIMD", 0);
    if (!want[1]) want[1] = wsync__impl_from_env("WSYNC_SIMD", 1);
    if (!want[0] || !want[1]) {
        wsync_impl m[2];
#if WSYNC__X86
        wsync__simd_measure(m);
#else
        m[0] = wsync__impl_widest(0);
        m[1] = wsync__impl_widest(1);
#endif
        if (!want[0]) want[0] = m[0];
        if (!want[1]) want[1] = m[1];
    }
    wsync__choice_publish(&wsync__simd_chosen[1 - op], (int)want[1 - op]);
    return (wsync_impl)wsync__choice_publish(&wsync__simd_chosen[op], (int)want[op]);
}

static wsync_impl wsync__digest_best(void)
{
    return wsync__simd_choose(1);
}

WSYNC_DEF wsync_impl wsync_diff_impl(void)
{
    return wsync__simd_choose(0);
}

WSYNC_DEF wsync_impl wsync_digest_impl(void)
{
    return wsync__simd_choose(1);
}

#ifndef WSYNC_NO_ENCODE
#if WSYNC__X86
/* Whether the encoder diffs 2-byte elements and digests the new image on
   the same loads (wsync__diff_digest_w2_avx2, in wsync__diff_block): where
   the CPU has AVX2 and neither choice is narrower than AVX2. Before, only
   where the digest's choice was AVX2 itself, so that an AVX-512 core made
   two passes over the new image where one does. */
static int wsync__diff_digest_fused(void)
{
    return wsync__has_avx2() && wsync__digest_best() >= WSYNC_IMPL_AVX2 && wsync__digest_best() <= WSYNC_IMPL_AVX512 &&
           wsync_diff_impl() >= WSYNC_IMPL_AVX2 && wsync_diff_impl() <= WSYNC_IMPL_AVX512;
}
#endif
#endif /* WSYNC_NO_ENCODE */


#if !defined(WSYNC_NO_ENCODE) || !defined(WSYNC_NO_CHAIN)
/* ---- digests of many tensors, on worker threads ---- */

typedef struct wsync__digjob {
    const wsync_tensor *t;
    uint64_t *out;
} wsync__digjob;

static wsync_result wsync__digest_item(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__digjob *j = (wsync__digjob *)user;
    (void)worker;
    (void)err;
    j->out[i] = wsync_digest(j->t[i].data, (size_t)j->t[i].nbytes);
    return WSYNC_OK;
}

static wsync_result wsync__tensor_digests(const wsync_tensor *t, size_t n, unsigned threads, uint64_t *out,
                                          wsync_error *err)
{
    wsync__digjob j;
    j.t = t;
    j.out = out;
    return wsync__workers_do(threads, n, wsync__digest_item, &j, err);
}
#endif



/* ======================================================================
   Delta: sparse encodings and apply  >>delta
   ======================================================================

   In this order: pieces every encoding shares (buffers, elements, the
   patch a decoded entry becomes and its target); ordered integers; the bit
   writer and reader; then each coder with its encoder and decoder side by
   side: packed (coder 1), packed-max (the range coder, classes, coder 2,
   coder 3); the stream both packed encodings wrap their blocks in; trl-v1
   and trl-v3; the encode driver (wsync_delta_encode); reading a delta;
   and the apply phases (wsync_delta_apply). */

#define WSYNC__DELTA_FORMAT "wsync-delta"
#define WSYNC__TRL_FORMAT "sparse_weight_patch"
#define WSYNC__STREAM_MAGIC "WSD1"
#define WSYNC__CODER_RICE 1
#define WSYNC__CODER_ARITH 2
#define WSYNC__CODER_CRICE 3 /* packed-max's class-Rice coder */
#define WSYNC__CODER_HAS_CLASSES(c) ((c) == WSYNC__CODER_ARITH || (c) == WSYNC__CODER_CRICE)
#define WSYNC__GAP_ESCAPE 32   /* unary length that announces a raw 32-bit gap */
#define WSYNC__VAL_ESCAPE 16   /* unary length that announces raw value bits */

WSYNC_DEF const char *wsync_encoding_name(wsync_encoding e)
{
    switch (e) {
    case WSYNC_ENCODING_PACKED: return "packed";
    case WSYNC_ENCODING_PACKED_MAX: return "packed-max";
    case WSYNC_ENCODING_TRL_V1: return "trl-v1";
    case WSYNC_ENCODING_TRL_V3: return "trl-v3";
    default: return "unknown";
    }
}

WSYNC_DEF wsync_encoding wsync_encoding_from_name(const char *name)
{
    int e;
    if (!name) return (wsync_encoding)0;
    for (e = WSYNC_ENCODING_PACKED; e <= WSYNC_ENCODING_TRL_V3; e++)
        if (strcmp(name, wsync_encoding_name((wsync_encoding)e)) == 0) return (wsync_encoding)e;
    return (wsync_encoding)0;
}

WSYNC_DEF wsync_result wsync_tensor_dense(wsync_tensor *t, const char *name, wsync_dtype dtype, uint32_t rank,
                                          const uint64_t *shape, void *data, wsync_error *err)
{
    uint64_t nelem = 1, nbytes = 0;
    size_t len = name ? strlen(name) : 0;
    wsync_result r;
    uint32_t d;
    wsync__error_reset(err);
    if (t) memset(t, 0, sizeof *t);
    if (!t || !name)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, name, len, "%s",
                           "wsync_tensor_dense needs a tensor and a name");
    if (wsync_dtype_bits(dtype) == 0)
        return wsync__fail(err, WSYNC_ERR_UNKNOWN_DTYPE, UINT64_MAX, name, len, "dtype %d", (int)dtype);
    if (rank > WSYNC_ST_DEFAULT_MAX_RANK)
        return wsync__fail(err, WSYNC_ERR_RANK_TOO_LARGE, UINT64_MAX, name, len, "rank %u (limit %u)",
                           (unsigned)rank, WSYNC_ST_DEFAULT_MAX_RANK);
    if (rank && !shape)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, name, len, "rank %u without a shape",
                           (unsigned)rank);
    for (d = 0; d < rank; d++)
        if (!wsync_mul_u64(nelem, shape[d], &nelem))
            return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, name, len, "%s",
                               "the product of the shape overflows 64 bits");
    if ((r = wsync_dtype_nbytes(dtype, nelem, &nbytes)) != WSYNC_OK)
        return wsync__fail(err, r, UINT64_MAX, name, len, "%llu elements of %s %s", (unsigned long long)nelem,
                           wsync_dtype_name(dtype),
                           r == WSYNC_ERR_OVERFLOW ? "overflow 64 bits" : "do not fill whole bytes");
    if (nbytes > (uint64_t)SIZE_MAX)
        return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, name, len, "%llu bytes do not fit a size_t",
                           (unsigned long long)nbytes);
    if (nbytes && !data)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, name, len, "%llu bytes without data",
                           (unsigned long long)nbytes);
    t->name = name;
    t->dtype = dtype;
    t->rank = rank;
    t->shape = rank ? shape : NULL;
    t->data = data;
    t->nbytes = nbytes;
    return WSYNC_OK;
}

/* ---- shared: buffers, elements, a patch and its target ---- */

/* A growable byte buffer over the caller's allocator (which has no realloc). */
typedef struct wsync__buf {
    uint8_t *p;
    size_t len, cap;
    const wsync_allocator *a;
} wsync__buf;

#if !defined(WSYNC_NO_ENCODE) || !defined(WSYNC_NO_CHAIN)
static int wsync__buf_reserve(wsync__buf *b, size_t more)
{
    size_t need, cap;
    uint8_t *np;
    if (!wsync_add_size(b->len, more, &need)) return 0;
    if (need <= b->cap) return 1;
    cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    np = (uint8_t *)wsync__alloc(b->a, cap);
    if (!np) return 0;
    if (b->len) memcpy(np, b->p, b->len);
    wsync__free(b->a, b->p);
    b->p = np;
    b->cap = cap;
    return 1;
}

static void wsync__buf_free(wsync__buf *b)
{
    wsync__free(b->a, b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
#endif


/* Calls F(..., W) with the element width w as the constant W: 1, 2, 4, else
   8 (the widths deltas take), so that F, inlined, copies each element with
   one load and store instead of a call to memcpy. */
#define WSYNC__BY_WIDTH(w, F, ...)          \
    do {                                    \
        switch (w) {                        \
        case 1: F(__VA_ARGS__, 1); break;   \
        case 2: F(__VA_ARGS__, 2); break;   \
        case 4: F(__VA_ARGS__, 4); break;   \
        default: F(__VA_ARGS__, 8); break;  \
        }                                   \
    } while (0)

/* Elements as integers: little-endian bytes (safetensors' byte order; wsync
   assumes a little-endian host for tensor data). */
WSYNC__INLINE uint64_t wsync__elem_load(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    switch (w) {
    case 1: v = p[0]; break;
    case 2: { uint16_t x; memcpy(&x, p, 2); v = x; } break;
    case 4: { uint32_t x; memcpy(&x, p, 4); v = x; } break;
    default: memcpy(&v, p, 8); break;
    }
    return v;
}

WSYNC__INLINE void wsync__elem_store(uint8_t *p, unsigned w, uint64_t v)
{
    switch (w) {
    case 1: p[0] = (uint8_t)v; break;
    case 2: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); } break;
    case 4: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); } break;
    default: memcpy(p, &v, 8); break;
    }
}

static void wsync__put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t wsync__get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* What one delta entry does to one target tensor, decoded and checked. */
typedef struct wsync__patch {
    wsync_tensor *target;         /* NULL: skipped (no target, or alias_target's) */
    wsync_tensor *alias_target;   /* a target sharing an earlier entry's target's memory:
                                     checked equal to that entry, not written again */
    const wsync_st_tensor *src;   /* packed: the stream; trl: the indices */
    const wsync_st_tensor *vals;  /* trl: the values */
    unsigned w;
    uint64_t nelem, count;
    uint8_t *list;                /* packed-max: the decoded changes (owned; wsync__list_entry) */
    int has_digests;
    uint64_t base_digest, result_digest;
    /* packed Rice streams are checked once and decoded again block by block
       where they are used, so no list of changes is ever held in memory */
    int rice;
    const uint8_t *stream;        /* the stream's bytes */
    uint64_t table_at, data_at;   /* offsets of the block table and the first block */
    uint64_t nblocks, blk;
} wsync__patch;

static int wsync__cmp_tensor_ptr_names(const void *a, const void *b)
{
    const wsync_tensor *x = *(const wsync_tensor *const *)a, *y = *(const wsync_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static wsync_tensor *wsync__target_find(wsync_tensor **sorted, size_t n, const char *name, size_t len)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *t = sorted[mid]->name;
        size_t tl = strlen(t);
        int c = wsync__cmp_names(t, tl, name, len);
        if (c == 0) return sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Matches a delta entry's dense name to a target and checks dtype/shape. */
static wsync_result wsync__match(wsync_tensor **sorted, size_t n, const char *name, size_t len,
                                 uint64_t at, wsync_tensor **out, unsigned *w, uint64_t *nelem,
                                 wsync_error *err)
{
    wsync_tensor *t = wsync__target_find(sorted, n, name, len);
    unsigned bits;
    uint64_t ne = 1, nb = 0;
    uint32_t d;
    if (!t)
        return wsync__fail(err, WSYNC_ERR_LAYOUT, at, name, len, "%s",
                           "the delta changes a tensor that no target has (the model does not match the chain)");
    bits = wsync_dtype_bits(t->dtype);
    for (d = 0; d < t->rank; d++)
        if (!wsync_mul_u64(ne, t->shape[d], &ne))
            return wsync__fail(err, WSYNC_ERR_OVERFLOW, at, name, len, "%s", "target shape overflows");
    if ((bits != 8 && bits != 16 && bits != 32 && bits != 64) || wsync_dtype_nbytes(t->dtype, ne, &nb) != WSYNC_OK ||
        nb != t->nbytes || (nb && !t->data))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, at, name, len,
                           "target %s tensor is unusable (dtype, nbytes or data)", wsync_dtype_name(t->dtype));
    *out = t;
    *w = bits / 8;
    *nelem = ne;
    return WSYNC_OK;
}

/* ---- ordered integers and steps >>ordered ---- */

/* Sign-magnitude floats as an ordered integer: adjacent representable values
   (crossing zero too: -0 and +0 are neighbours) differ by one. A bijection on
   all bit patterns, so NaN payloads and non-float dtypes round-trip. */
WSYNC__INLINE uint64_t wsync__ord(uint64_t u, unsigned w)
{
    /* negative: flip every bit; positive: set the sign bit (branch-free:
       signs of weights are random, a branch would miss half the time) */
    uint64_t sign = (uint64_t)1 << (8 * w - 1), mask = w == 8 ? ~(uint64_t)0 : (sign << 1) - 1;
    return u ^ (sign | ((0 - ((u >> (8 * w - 1)) & 1)) & mask));
}

WSYNC__INLINE uint64_t wsync__unord(uint64_t o, unsigned w)
{
    uint64_t sign = (uint64_t)1 << (8 * w - 1), mask = w == 8 ? ~(uint64_t)0 : (sign << 1) - 1;
    return o ^ (sign | ((((o >> (8 * w - 1)) & 1) - 1) & mask));
}

/* d != 0 to 0, 1, 2, ...: +1 -> 0, -1 -> 1, +2 -> 2, -2 -> 3 (zigzag minus
   one, since a listed element always changed). Modulo 2^64 for 8-byte
   elements. */
WSYNC__INLINE uint64_t wsync__zz(uint64_t d)
{
    /* branch-free form of d > 0 ? 2(d - 1) : 2|d| - 1, s all ones when d < 0 */
    uint64_t s = 0 - (d >> 63);
    return 2 * ((d ^ s) - s) - 2 - s;
}

WSYNC__INLINE uint64_t wsync__unzz(uint64_t z)
{
    uint64_t s = 0 - (z & 1);
    return (((z >> 1) + 1) ^ s) - s;
}

/* ---- bit writer / reader: LSB first >>bits ---- */

typedef struct wsync__bw {
    uint8_t *out;
    uint64_t acc;
    unsigned n;
} wsync__bw;

/* Branch-free: every put stores 8 bytes at out (the buffer has 8 bytes of
   slack) and advances by the whole bytes completed, so fewer than 8 bits
   stay in acc. n <= 56 and v has no bits above n: acc holds up to 7 bits,
   and 7 + 57 would shift acc by 64 below. The stream is LSB-first, byte by
   byte, whatever the host. */
WSYNC__INLINE void wsync__bw_put(wsync__bw *b, uint64_t v, unsigned n)
{
    uint64_t acc = b->acc | v << b->n;
    unsigned bits = b->n + n;
    wsync__store_le64(b->out, acc);
    b->out += bits >> 3;
    b->acc = acc >> (bits & ~7u);
    b->n = bits & 7u;
}

#ifndef WSYNC_NO_ENCODE
static void wsync__bw_flush(wsync__bw *b)
{
    if (b->n) *b->out++ = (uint8_t)b->acc;
    b->acc = 0;
    b->n = 0;
}
#endif /* WSYNC_NO_ENCODE */


typedef struct wsync__br {
    const uint8_t *p, *end;
    uint64_t buf;
    unsigned avail;
} wsync__br;

WSYNC__INLINE void wsync__br_refill(wsync__br *r)
{
    if (r->end - r->p >= 8) {
        r->buf |= wsync__le64(r->p) << r->avail;
        r->p += (63 - r->avail) >> 3;
        r->avail |= 56;
    } else {
        while (r->avail <= 56 && r->p < r->end) {
            r->buf |= (uint64_t)*r->p++ << r->avail;
            r->avail += 8;
        }
    }
}

WSYNC__INLINE uint64_t wsync__br_take(wsync__br *r, unsigned n) /* n <= avail, n < 64 */
{
    uint64_t v = r->buf & ((((uint64_t)1) << n) - 1);
    r->buf >>= n;
    r->avail -= n;
    return v;
}

#ifndef WSYNC_NO_ENCODE
/* The Rice parameter with the shortest expected code for gaps drawn from a
   geometric distribution with mean sum/count: the smallest k with
   theta^(2^k) <= phi - 1, theta = mean / (mean + 1) (Gallager and Van
   Voorhis, 1975), in 32-bit fixed point so every platform picks the same;
   at most 24. */
static unsigned wsync__rice_k_geometric(uint64_t sum, uint64_t count)
{
    uint64_t t;
    unsigned k = 0;
    if (count == 0 || sum == 0 || sum >= ((uint64_t)1 << 31)) return sum ? 24 : 0;
    t = (sum << 32) / (sum + count); /* theta, below 2^32 */
    while (k < 24 && t > 0x9E3779B9u) { /* (sqrt(5) - 1) / 2 in 32-bit fixed point */
        t = (t * t) >> 32;
        k++;
    }
    return k;
}

/* The Rice parameter with (about) the fewest bits for a block's values,
   counting the escape (`esc` ones then `raw` bits) where the quotient
   reaches `esc`. From a histogram by bit length L: cnt[L] values, sum[L]
   their sum (each value capped at 2^40); the cost of every k is estimated
   from those 65 bins (the sum of v >> k is taken as sum / 2^k), so the
   choice costs a few operations per value whatever the number of
   candidates. The decoder does not care how k was chosen. */
static unsigned wsync__rice_pick(const uint64_t *cnt, const uint64_t *sum, unsigned esc, unsigned raw, unsigned kmax)
{
    uint64_t best_cost = UINT64_MAX;
    unsigned k, L, best = 0, top = 0;
    for (L = 0; L <= 64; L++)
        if (cnt[L]) top = L;
    if (kmax > top) kmax = top;
    for (k = 0; k <= kmax; k++) {
        uint64_t cost = 0;
        for (L = 0; L <= top; L++) {
            if (!cnt[L]) continue;
            if (L <= k) {
                cost += cnt[L] * (1 + k);                           /* quotient 0 */
            } else if (L - 1 - k >= 6 || ((uint64_t)1 << (L - 1 - k)) >= esc) {
                cost += cnt[L] * (esc + raw);                       /* all escaped */
            } else {
                uint64_t q = sum[L] >> k;
                if (q > cnt[L] * esc) q = cnt[L] * esc;             /* partly escaped */
                cost += cnt[L] * (1 + k) + q;
            }
        }
        if (cost < best_cost) best_cost = cost, best = k;
    }
    return best;
}

static size_t wsync__varint_put(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}
#endif /* WSYNC_NO_ENCODE */


/* 0 on a malformed or over-long varint. */
static size_t wsync__varint_get(const uint8_t *p, size_t avail, uint64_t *v)
{
    uint64_t x = 0;
    size_t i;
    for (i = 0; i < avail && i < 10; i++) {
        uint64_t b = p[i] & 0x7F;
        if (i == 9 && b > 1) return 0;
        x |= b << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* Scratch for one block of the encoder. */
typedef struct wsync__encblk {
    uint32_t *pos;
    size_t cap;
    /* packed-max only */
    uint8_t *cls;     /* class bytes of the block */
    uint32_t *rank;   /* per change, in by_class order: its rank within its class */
    struct wsync__ctx *ctx;
    uint32_t *by_class;
    uint64_t *zv;     /* class-Rice: per change, in by_class order: its zigzag step */
} wsync__encblk;

/* ==== packed (coder 1): Rice blocks, the encoder and the decoder ==== */

#ifndef WSYNC_NO_ENCODE
/* ---- packed (coder 1): the Rice block encoder >>packed-enc ---- */

/* v as a Rice code with parameter k, its quotient q = v >> k below 32: q
   ones, a zero, the low k bits; in two puts where that exceeds 32 bits. */
WSYNC__INLINE void wsync__bw_rice(wsync__bw *bw, uint64_t v, uint64_t q, unsigned k)
{
    if (q + 1 + k <= 32) {
        wsync__bw_put(bw, (((uint64_t)1 << q) - 1) | (v & (((uint64_t)1 << k) - 1)) << (q + 1), (unsigned)q + 1 + k);
    } else {
        wsync__bw_put(bw, ((uint64_t)1 << q) - 1, (unsigned)q + 1);
        if (k) wsync__bw_put(bw, v & (((uint64_t)1 << k) - 1), k);
    }
}

/* Change i's gap and value codes, every case (escapes, codes over 56
   bits); both codes with one put when they fit in 56 bits, nearly always. */
WSYNC__INLINE void wsync__rice_put_one(wsync__bw *bw, const uint8_t *base, const uint8_t *next, unsigned w,
                                const uint32_t *pos, size_t i, unsigned kg, unsigned kv)
{
    const unsigned vbits = 8 * w;
    uint64_t b = wsync__elem_load(base + (size_t)pos[i] * w, w);
    uint64_t x = wsync__elem_load(next + (size_t)pos[i] * w, w);
    uint64_t g = pos[i] - (i ? pos[i - 1] + 1 : 0), q = g >> kg;
    uint64_t z = wsync__zz(wsync__ord(x, w) - wsync__ord(b, w)), qv = z >> kv;
    if (q < WSYNC__GAP_ESCAPE && qv < WSYNC__VAL_ESCAPE && q + 1 + kg + qv + 1 + kv <= 56) {
        /* the usual case: q ones, a zero, kg bits; qv ones, a zero, kv bits */
        unsigned ng = (unsigned)q + 1 + kg;
        uint64_t cg = (((uint64_t)1 << q) - 1) | (g & (((uint64_t)1 << kg) - 1)) << (q + 1);
        uint64_t cv = (((uint64_t)1 << qv) - 1) | (z & (((uint64_t)1 << kv) - 1)) << (qv + 1);
        wsync__bw_put(bw, cg | cv << ng, ng + (unsigned)qv + 1 + kv);
        return;
    }
    if (q >= WSYNC__GAP_ESCAPE) {
        wsync__bw_put(bw, 0xFFFFFFFFu, 32);
        wsync__bw_put(bw, g, 32);
    } else {
        wsync__bw_rice(bw, g, q, kg);
    }
    if (qv >= WSYNC__VAL_ESCAPE) {
        wsync__bw_put(bw, 0xFFFFu, WSYNC__VAL_ESCAPE);
        if (vbits > 32) {
            wsync__bw_put(bw, x & 0xFFFFFFFFu, 32);
            wsync__bw_put(bw, x >> 32, 32);
        } else {
            wsync__bw_put(bw, x, vbits);
        }
    } else {
        wsync__bw_rice(bw, z, qv, kv);
    }
}

#if WSYNC__X86
/* ord of eight 16-bit patterns in 32-bit lanes: a pattern with the sign bit
   set has its other bits flipped, any other gains the sign bit. */
WSYNC__AVX2_INLINE __m256i wsync__ord16_avx2(__m256i u)
{
    __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_srli_epi32(u, 15));
    return _mm256_xor_si256(u, _mm256_or_si256(_mm256_set1_epi32(0x8000), _mm256_and_si256(neg, _mm256_set1_epi32(0x7FFF))));
}

/* The codes of up to 64 changes of 2-byte elements, eight at a time, from
   change i on, two changes to a word: words[j] and bits[j] are what one
   wsync__bw_put writes for changes i + 2j and i + 2j + 1, exactly the bits
   the portable coder below writes for them in two puts. bits[j] = 0 where
   either change's codes take more than 32 bits or escape, or the pair more
   than 56 (the most one put takes): the caller codes those two on its own.
   Stops before a group of eight that would run past `count`; returns the
   changes done (a multiple of 8). The shifts by up to 32 that a bad lane may
   ask for give 0 in AVX2, so its word is merely unused. */
WSYNC__AVX2 static size_t wsync__rice_pairs_w2_avx2(const uint8_t *base, const uint8_t *next, const uint32_t *pos,
                                                    size_t i, size_t count, unsigned kg, unsigned kv,
                                                    uint64_t *words, uint64_t *bits)
{
    const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2), zero = _mm256_setzero_si256();
    const __m256i rot = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6), last = _mm256_set1_epi32(7);
    const __m256i lim_qv = _mm256_set1_epi32(WSYNC__VAL_ESCAPE - 1), lim_n = _mm256_set1_epi32(32);
    const __m256i kg1 = _mm256_set1_epi32((int)kg + 1), kv1 = _mm256_set1_epi32((int)kv + 1);
    const __m256i mg = _mm256_set1_epi32((int)(((uint64_t)1 << kg) - 1));
    const __m256i mv = _mm256_set1_epi32((int)(((uint64_t)1 << kv) - 1));
    const __m256i low = _mm256_set1_epi64x(0xFFFFFFFFll), pair_max = _mm256_set1_epi64x(57);
    const __m128i ckg = _mm_cvtsi32_si128((int)kg), ckv = _mm_cvtsi32_si128((int)kv);
    __m256i prev_end = _mm256_set1_epi32((int)(i ? pos[i - 1] + 1 : 0));
    size_t done = 0;
    while (done < 64 && count - i - done >= 8) {
        const uint32_t *pp = pos + i + done;
        __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)pp);
        __m256i p1 = _mm256_add_epi32(p, one);
        __m256i g = _mm256_sub_epi32(p, _mm256_blend_epi32(_mm256_permutevar8x32_epi32(p1, rot), prev_end, 1));
        /* eight scalar loads each, not a gather: independent loads overlap,
           where a gather's cost varies widely from core to core */
        __m256i b = _mm256_setr_epi32(
            (int)wsync__elem_load(base + 2 * (size_t)pp[0], 2), (int)wsync__elem_load(base + 2 * (size_t)pp[1], 2),
            (int)wsync__elem_load(base + 2 * (size_t)pp[2], 2), (int)wsync__elem_load(base + 2 * (size_t)pp[3], 2),
            (int)wsync__elem_load(base + 2 * (size_t)pp[4], 2), (int)wsync__elem_load(base + 2 * (size_t)pp[5], 2),
            (int)wsync__elem_load(base + 2 * (size_t)pp[6], 2), (int)wsync__elem_load(base + 2 * (size_t)pp[7], 2));
        __m256i x = _mm256_setr_epi32(
            (int)wsync__elem_load(next + 2 * (size_t)pp[0], 2), (int)wsync__elem_load(next + 2 * (size_t)pp[1], 2),
            (int)wsync__elem_load(next + 2 * (size_t)pp[2], 2), (int)wsync__elem_load(next + 2 * (size_t)pp[3], 2),
            (int)wsync__elem_load(next + 2 * (size_t)pp[4], 2), (int)wsync__elem_load(next + 2 * (size_t)pp[5], 2),
            (int)wsync__elem_load(next + 2 * (size_t)pp[6], 2), (int)wsync__elem_load(next + 2 * (size_t)pp[7], 2));
        __m256i d = _mm256_sub_epi32(wsync__ord16_avx2(x), wsync__ord16_avx2(b)), sg = _mm256_srai_epi32(d, 31);
        /* zigzag without the zero: 2|d| - 2 - (d < 0) */
        __m256i z = _mm256_sub_epi32(_mm256_sub_epi32(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_xor_si256(d, sg), sg), 1), two), sg);
        __m256i q = _mm256_srl_epi32(g, ckg), qv = _mm256_srl_epi32(z, ckv);
        __m256i ng = _mm256_add_epi32(q, kg1), n = _mm256_add_epi32(ng, _mm256_add_epi32(qv, kv1));
        /* more than 32 bits covers a gap escape too (q >= 32) */
        __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(qv, lim_qv), _mm256_cmpgt_epi32(n, lim_n));
        __m256i cg = _mm256_or_si256(_mm256_sub_epi32(_mm256_sllv_epi32(one, q), one),
                                     _mm256_sllv_epi32(_mm256_and_si256(g, mg), _mm256_add_epi32(q, one)));
        __m256i cv = _mm256_or_si256(_mm256_sub_epi32(_mm256_sllv_epi32(one, qv), one),
                                     _mm256_sllv_epi32(_mm256_and_si256(z, mv), _mm256_add_epi32(qv, one)));
        __m256i w32 = _mm256_or_si256(cg, _mm256_sllv_epi32(cv, ng));
        /* pairs: the odd change's word above the even one's bits */
        __m256i n_even = _mm256_and_si256(n, low), n_pair = _mm256_add_epi64(n_even, _mm256_srli_epi64(n, 32));
        __m256i w64 = _mm256_or_si256(_mm256_and_si256(w32, low), _mm256_sllv_epi64(_mm256_srli_epi64(w32, 32), n_even));
        __m256i good = _mm256_and_si256(_mm256_cmpeq_epi64(bad, zero), _mm256_cmpgt_epi64(pair_max, n_pair));
        _mm256_storeu_si256((__m256i *)(void *)(words + done / 2), w64);
        _mm256_storeu_si256((__m256i *)(void *)(bits + done / 2), _mm256_and_si256(good, n_pair));
        prev_end = _mm256_permutevar8x32_epi32(p1, last);
        done += 8;
    }
    return done;
}
#endif

/* One block's payload: varint count, kg, kv, then per change the gap and
   the value code. Appends to out; `count` > 0. The parameters come first
   (below), then one pass codes each change, both codes with one put when
   they fit in 56 bits, which is nearly always. */
WSYNC__INLINE int wsync__rice_block_w(wsync__buf *out, const uint8_t *base, const uint8_t *next, const unsigned w,
                                      const uint32_t *pos, size_t count, int simd)
{
    size_t i, step = count / 64 + 1;
    unsigned kg, kv;
    const unsigned vbits = 8 * w;
    uint64_t cnt[65], sum[65];
    const uint64_t cap = (uint64_t)1 << 40;
    wsync__bw bw;
    /* Gaps: the parameter that is best for a geometric source with the
       block's mean gap, which the positions give without a pass (the gaps
       add up to the last position + 1 - count). Values: the exact-cost pick
       over at most 64 of them, spread over the block. One pass then codes. */
    kg = wsync__rice_k_geometric((uint64_t)pos[count - 1] + 1 - count, count);
    memset(cnt, 0, sizeof cnt);
    memset(sum, 0, sizeof sum);
    for (i = 0; i < count; i += step) {
        uint64_t b = wsync__elem_load(base + (size_t)pos[i] * w, w);
        uint64_t x = wsync__elem_load(next + (size_t)pos[i] * w, w);
        uint64_t z = wsync__zz(wsync__ord(x, w) - wsync__ord(b, w));
        unsigned lv = wsync__bitlen64(z);
        cnt[lv]++;
        sum[lv] += z < cap ? z : cap;
    }
    kv = wsync__rice_pick(cnt, sum, WSYNC__VAL_ESCAPE, vbits, 31);
    /* worst case per change: 64 bits of gap, 16 + 64 of value */
    if (!wsync__buf_reserve(out, 12 + count * 19 + 8)) return 0;
    out->len += wsync__varint_put(out->p + out->len, count);
    out->p[out->len++] = (uint8_t)kg;
    out->p[out->len++] = (uint8_t)kv;
    bw.out = out->p + out->len;
    bw.acc = 0;
    bw.n = 0;
    i = 0;
#if WSYNC__X86
    /* whole groups of eight through the AVX2 coder, two changes to a put */
    while (simd && count - i >= 8) {
        uint64_t words[32], bits[32];
        size_t j, nv = wsync__rice_pairs_w2_avx2(base, next, pos, i, count, kg, kv, words, bits);
        for (j = 0; j < nv / 2; j++) {
            if (bits[j]) {
                wsync__bw_put(&bw, words[j], (unsigned)bits[j]);
            } else {
                wsync__rice_put_one(&bw, base, next, w, pos, i + 2 * j, kg, kv);
                wsync__rice_put_one(&bw, base, next, w, pos, i + 2 * j + 1, kg, kv);
            }
        }
        i += nv;
    }
#else
    (void)simd;
#endif
    for (; i < count; i++) wsync__rice_put_one(&bw, base, next, w, pos, i, kg, kv);
    wsync__bw_flush(&bw);
    out->len = (size_t)(bw.out - out->p);
    return 1;
}

/* `impl`: WSYNC_IMPL_AUTO takes the AVX2 coder for 2-byte elements where
   the CPU has it; any other value the portable one (the reference tests hold
   it to, byte for byte). */
static int wsync__rice_block(wsync__buf *out, const uint8_t *base, const uint8_t *next, unsigned w,
                             const uint32_t *pos, size_t count, wsync_impl impl)
{
    switch (w) {
    case 1: return wsync__rice_block_w(out, base, next, 1, pos, count, 0);
    case 2:
#if WSYNC__X86
        if (impl == WSYNC_IMPL_AUTO && wsync__has_avx2())
            return wsync__rice_block_w(out, base, next, 2, pos, count, 1);
#endif
        (void)impl;
        return wsync__rice_block_w(out, base, next, 2, pos, count, 0);
    case 4: return wsync__rice_block_w(out, base, next, 4, pos, count, 0);
    default: return wsync__rice_block_w(out, base, next, 8, pos, count, 0);
    }
}

#endif /* WSYNC_NO_ENCODE */

/* ---- packed (coder 1): the Rice block decoder >>packed-dec ---- */

/* One Rice block, in one of two modes. Checking (out NULL) reads only the
   stream: counts, gaps, positions inside the block, escapes, padding; it
   needs no base. Patching sets out[at] to base[at] stepped by each change's
   code (out may be base itself); it runs only on a block already checked,
   and value codes are taken modulo the element's bits, so it cannot fail
   half way. A wrong base or a corrupt value code is caught by the digests.

   Speed: while WSYNC__RICE_MARGIN bytes of the block remain, a change is
   read with unconditional 8-byte refills and no end tests (the longest
   change, a gap escape and a raw 8-byte value, reads at most 30 bytes past
   the reader's position: 14 bytes consumed before its last refill, which
   loads 8 bytes at most 8 ahead of what was consumed); the last bytes go
   through the checked reader. Patching decodes a chunk of changes into small arrays
   first and applies them in a second loop of independent loads and stores,
   so that misses on the target overlap instead of stalling the decoder. */
#define WSYNC__RICE_MARGIN 40
#define WSYNC__RICE_CHUNK 64

/* 8 readable bytes at r->p: afterwards all 64 bits of buf are stream bits
   and avail >= 56. */
WSYNC__INLINE void wsync__br_refill_fast(wsync__br *r)
{
    r->buf |= wsync__le64(r->p) << r->avail;
    r->p += (63 - r->avail) >> 3;
    r->avail |= 56;
}

/* Leading ones of buf, counted up to `cap` (< 64). */
WSYNC__INLINE unsigned wsync__ones_upto(uint64_t buf, unsigned cap)
{
    return wsync__ctz64(~buf | (uint64_t)1 << cap);
}

/* A gap code; 0 when the stream ends inside it (only when !fast). */
WSYNC__INLINE int wsync__rice_gap(wsync__br *r, unsigned kg, const int fast, uint64_t *g)
{
    unsigned q;
    if (fast) wsync__br_refill_fast(r);
    else wsync__br_refill(r);
    q = wsync__ones_upto(r->buf, WSYNC__GAP_ESCAPE);
    if (q < WSYNC__GAP_ESCAPE && (fast || q + 1 + kg <= r->avail)) {
        unsigned n = q + 1 + kg;
        *g = (uint64_t)q << kg | ((r->buf >> (q + 1)) & ((((uint64_t)1) << kg) - 1));
        r->buf >>= n;
        r->avail -= n;
        return 1;
    }
    if (q < WSYNC__GAP_ESCAPE || (!fast && r->avail < 32)) return 0;
    wsync__br_take(r, 32);
    if (fast) wsync__br_refill_fast(r);
    else wsync__br_refill(r);
    if (!fast && r->avail < 32) return 0;
    *g = wsync__br_take(r, 32);
    return 1;
}

/* A value code: 1 for a step, 2 for raw bits, 0 when the stream ends
   inside it (only when !fast). */
WSYNC__INLINE int wsync__rice_val(wsync__br *r, unsigned kv, const unsigned vbits, const int fast, uint64_t *code)
{
    unsigned q;
    if (!fast) wsync__br_refill(r);
    else if (r->avail < 47) /* 47: the longest step code; usually left over from the gap's refill */
        wsync__br_refill_fast(r);
    q = wsync__ones_upto(r->buf, WSYNC__VAL_ESCAPE);
    if (q < WSYNC__VAL_ESCAPE && (fast || q + 1 + kv <= r->avail)) {
        unsigned n = q + 1 + kv;
        *code = (uint64_t)q << kv | ((r->buf >> (q + 1)) & ((((uint64_t)1) << kv) - 1));
        r->buf >>= n;
        r->avail -= n;
        return 1;
    }
    if (q < WSYNC__VAL_ESCAPE || (!fast && r->avail < WSYNC__VAL_ESCAPE)) return 0;
    wsync__br_take(r, WSYNC__VAL_ESCAPE);
    if (fast) wsync__br_refill_fast(r);
    else wsync__br_refill(r);
    if (vbits > 32) {
        uint64_t lo;
        if (!fast && r->avail < 32) return 0;
        lo = wsync__br_take(r, 32);
        if (fast) wsync__br_refill_fast(r);
        else wsync__br_refill(r);
        if (!fast && r->avail < 32) return 0;
        *code = lo | wsync__br_take(r, 32) << 32;
    } else {
        if (!fast && r->avail < vbits) return 0;
        *code = wsync__br_take(r, vbits);
    }
    return 2;
}

/* One Rice block being decoded, resumable between changes. */
typedef struct wsync__rs {
    wsync__br r;
    const uint8_t *payload; /* the first bit-stream byte */
    size_t payload_size;
    uint64_t count, i, next, len;
    unsigned kg, kv;
} wsync__rs;

static wsync_result wsync__rs_open(wsync__rs *s, const uint8_t *p, size_t size, uint64_t len, uint64_t room,
                                   const char **why)
{
    size_t used = wsync__varint_get(p, size, &s->count);
    if (!used || s->count == 0 || s->count > len) return *why = "bad change count", WSYNC_ERR_CORRUPT;
    if (s->count > room) return *why = "more changes than the stream header declares", WSYNC_ERR_CORRUPT;
    if (size - used < 2) return *why = "block header truncated", WSYNC_ERR_CORRUPT;
    s->kg = p[used];
    s->kv = p[used + 1];
    if (s->kg > 24 || s->kv > 31) return *why = "bad Rice parameter", WSYNC_ERR_CORRUPT;
    s->payload = p + used + 2;
    s->payload_size = size - used - 2;
    s->r.p = s->payload;
    s->r.end = p + size;
    s->r.buf = 0;
    s->r.avail = 0;
    s->i = 0;
    s->next = 0;
    s->len = len;
    return WSYNC_OK;
}

/* The next change, with every bound checked; kind 1: code is a step, 2: raw
   bits. */
WSYNC__INLINE wsync_result wsync__rs_step(wsync__rs *s, const unsigned vbits, uint64_t *at, uint64_t *code,
                                          int *kind, const char **why)
{
    uint64_t g = 0;
    if (s->r.end - s->r.p >= WSYNC__RICE_MARGIN) {
        wsync__rice_gap(&s->r, s->kg, 1, &g);
    } else if (!wsync__rice_gap(&s->r, s->kg, 0, &g)) {
        return *why = "stream ends inside a gap", WSYNC_ERR_CORRUPT;
    }
    *at = s->next + g;
    if (*at >= s->len) return *why = "position past the end of its block", WSYNC_ERR_OUT_OF_BOUNDS;
    s->next = *at + 1;
    *kind = s->r.end - s->r.p >= WSYNC__RICE_MARGIN ? wsync__rice_val(&s->r, s->kv, vbits, 1, code)
                                                   : wsync__rice_val(&s->r, s->kv, vbits, 0, code);
    if (!*kind) return *why = "stream ends inside a value", WSYNC_ERR_CORRUPT;
    s->i++;
    return WSYNC_OK;
}

/* The next change where at least WSYNC__RICE_MARGIN bytes are left: one
   change's codes take at most 18 bytes, the reader holds at most 7 ahead and
   a refill loads 8, so it reads at most 33 bytes past r.p and no bound but
   the position's needs checking. 0 for a position past the block. */
WSYNC__INLINE int wsync__rs_step_fast(wsync__rs *s, const unsigned vbits, uint64_t *at, uint64_t *code, int *kind)
{
    uint64_t g = 0;
    wsync__rice_gap(&s->r, s->kg, 1, &g);
    *at = s->next + g;
    s->next = *at + 1;
    *kind = wsync__rice_val(&s->r, s->kv, vbits, 1, code);
    s->i++;
    return *at < s->len;
}

/* The block must end where its changes do: at most 7 zero padding bits. */
static wsync_result wsync__rs_close(wsync__rs *s, const char **why)
{
    uint64_t consumed = (uint64_t)(s->r.p - s->payload) * 8 - s->r.avail;
    uint64_t total = (uint64_t)s->payload_size * 8;
    if (total - consumed >= 8) return *why = "bytes left over after the block's changes", WSYNC_ERR_TRAILING_BYTES;
    wsync__br_refill(&s->r);
    if (s->r.buf & ((((uint64_t)1) << (total - consumed)) - 1))
        return *why = "nonzero padding bits", WSYNC_ERR_CORRUPT;
    return WSYNC_OK;
}

/* The decoded changes of one chunk, written: new = base + step in ordered
   space, or the raw bits. */
WSYNC__INLINE void wsync__rice_write(const uint8_t *base, uint8_t *out, const unsigned w, uint64_t vmask,
                                     const uint32_t *at, const uint64_t *code, const uint8_t *raw, uint64_t n)
{
    uint64_t j;
    for (j = 0; j < n; j++) {
        uint64_t z = code[j], b = wsync__elem_load(base + (size_t)at[j] * w, w);
        uint64_t x = wsync__unord((wsync__ord(b, w) + wsync__unzz(z)) & vmask, w);
        wsync__elem_store(out + (size_t)at[j] * w, w, raw[j] ? z : x);
    }
}

/* The rest of an open block: checked only (out == NULL), or decoded and
   written in chunks whose targets are prefetched while they are decoded. */
WSYNC__INLINE wsync_result wsync__rs_rest(wsync__rs *s, const uint8_t *base, uint8_t *out, const unsigned w,
                                          const char **why)
{
    const unsigned vbits = 8 * w;
    const uint64_t vmask = w == 8 ? ~(uint64_t)0 : (((uint64_t)1) << vbits) - 1;
    uint32_t at_buf[WSYNC__RICE_CHUNK];
    uint64_t code_buf[WSYNC__RICE_CHUNK];
    uint8_t raw_buf[WSYNC__RICE_CHUNK];
    wsync_result r;
    while (s->i < s->count) {
        uint64_t n = s->count - s->i < WSYNC__RICE_CHUNK ? s->count - s->i : WSYNC__RICE_CHUNK, j;
        for (j = 0; j < n; j++) {
            uint64_t at = 0, code = 0;
            int kind = 0;
            if ((r = wsync__rs_step(s, vbits, &at, &code, &kind, why)) != WSYNC_OK) return r;
            if (out) {
                const uint8_t *t = base + (size_t)at * w;
                WSYNC__PREFETCH(t);
                /* and 8 KiB further on into L2, two lines a change: at 1.6%
                   density a change every 2 lines, so the targets of the
                   chunks after this one are mostly on their way when those
                   chunks are written, and their misses overlap the decoding
                   instead of stalling the writes */
                wsync__prefetch_l2(t, 8192);
                wsync__prefetch_l2(t, 8192 + 64);
                at_buf[j] = (uint32_t)at;
                code_buf[j] = code;
                raw_buf[j] = (uint8_t)(kind - 1);
            }
        }
        if (out) wsync__rice_write(base, out, w, vmask, at_buf, code_buf, raw_buf, n);
    }
    return WSYNC_OK;
}

WSYNC__INLINE wsync_result wsync__rice_run_w(const uint8_t *p, size_t size, const uint8_t *base, uint8_t *out,
                                            const unsigned w, uint64_t len, uint64_t room, uint64_t *count_out,
                                            const char **why)
{
    wsync__rs s;
    wsync_result r;
    if ((r = wsync__rs_open(&s, p, size, len, room, why)) != WSYNC_OK) return r;
    if ((r = wsync__rs_rest(&s, base, out, w, why)) != WSYNC_OK) return r;
    if ((r = wsync__rs_close(&s, why)) != WSYNC_OK) return r;
    *count_out = s.count;
    return WSYNC_OK;
}

/* Two blocks checked at once (no writes): their decoding chains are
   independent, so interleaving them keeps more of the core busy than one
   block at a time. WSYNC_OK with both counts, or not OK: the caller then
   checks the two one by one, for the error of the first that fails. */
WSYNC__INLINE wsync_result wsync__rice_check2_w(const uint8_t *pa, size_t sa, uint64_t la, const uint8_t *pb,
                                               size_t sb, uint64_t lb, const unsigned w, uint64_t room,
                                               uint64_t *ca, uint64_t *cb)
{
    const unsigned vbits = 8 * w;
    const char *why;
    wsync__rs a, b;
    if (wsync__rs_open(&a, pa, sa, la, room, &why) != WSYNC_OK ||
        wsync__rs_open(&b, pb, sb, lb, room - a.count, &why) != WSYNC_OK)
        return WSYNC_ERR_INVALID_ARGUMENT;
    while (a.i < a.count && b.i < b.count && a.r.end - a.r.p >= WSYNC__RICE_MARGIN &&
           b.r.end - b.r.p >= WSYNC__RICE_MARGIN) {
        uint64_t at_a, at_b, code_a, code_b;
        int kind_a, kind_b;
        int ok_a = wsync__rs_step_fast(&a, vbits, &at_a, &code_a, &kind_a);
        int ok_b = wsync__rs_step_fast(&b, vbits, &at_b, &code_b, &kind_b);
        if (!(ok_a & ok_b)) return WSYNC_ERR_OUT_OF_BOUNDS;
    }
    if (wsync__rs_rest(&a, NULL, NULL, w, &why) != WSYNC_OK || wsync__rs_rest(&b, NULL, NULL, w, &why) != WSYNC_OK ||
        wsync__rs_close(&a, &why) != WSYNC_OK || wsync__rs_close(&b, &why) != WSYNC_OK)
        return WSYNC_ERR_INVALID_ARGUMENT;
    *ca = a.count;
    *cb = b.count;
    return WSYNC_OK;
}

static wsync_result wsync__rice_check2(const uint8_t *pa, size_t sa, uint64_t la, const uint8_t *pb, size_t sb,
                                       uint64_t lb, unsigned w, uint64_t room, uint64_t *ca, uint64_t *cb)
{
    switch (w) {
    case 1: return wsync__rice_check2_w(pa, sa, la, pb, sb, lb, 1, room, ca, cb);
    case 2: return wsync__rice_check2_w(pa, sa, la, pb, sb, lb, 2, room, ca, cb);
    case 4: return wsync__rice_check2_w(pa, sa, la, pb, sb, lb, 4, room, ca, cb);
    default: return wsync__rice_check2_w(pa, sa, la, pb, sb, lb, 8, room, ca, cb);
    }
}

static wsync_result wsync__rice_run(const uint8_t *p, size_t size, const uint8_t *base, uint8_t *out, unsigned w,
                                    uint64_t len, uint64_t room, uint64_t *count_out, const char **why)
{
    switch (w) {
    case 1: return wsync__rice_run_w(p, size, base, out, 1, len, room, count_out, why);
    case 2: return wsync__rice_run_w(p, size, base, out, 2, len, room, count_out, why);
    case 4: return wsync__rice_run_w(p, size, base, out, 4, len, room, count_out, why);
    default: return wsync__rice_run_w(p, size, base, out, 8, len, room, count_out, why);
    }
}

/* Checks the Rice blocks b0 <= bi < b1 of a tensor's stream (block table at
   `table`, block b0's bytes at p + off), two at a time where both have
   changes, and adds their changes to *count. A block may hold up to `room`
   changes, less those counted before it when `shrink`. On failure: the
   first failing block, its stream offset and the reason, exactly as one
   block at a time would find them. */
static wsync_result wsync__rice_check_blocks(const uint8_t *p, uint64_t table, uint64_t off, uint64_t b0, uint64_t b1,
                                             uint64_t blk, uint64_t nelem, unsigned w, uint64_t room, int shrink,
                                             uint64_t *count, uint64_t *bad_block, uint64_t *bad_off,
                                             const char **why)
{
    uint64_t bi = b0;
    while (bi < b1) {
        uint32_t sa = wsync__get_le32(p + table + 4 * bi), sb = bi + 1 < b1 ? wsync__get_le32(p + table + 4 * (bi + 1)) : 0;
        uint64_t first = bi * blk, la = nelem - first < blk ? nelem - first : blk, ca = 0, cb = 0, lb, k;
        uint64_t r_room = shrink ? room - *count : room;
        if (sa && sb) {
            lb = nelem - first - la < blk ? nelem - first - la : blk;
            if (wsync__rice_check2(p + off, sa, la, p + off + sa, sb, lb, w, r_room, &ca, &cb) == WSYNC_OK) {
                *count += ca + cb;
                off += (uint64_t)sa + sb;
                bi += 2;
                continue;
            }
        }
        /* one block, or a pair that failed: one at a time from here */
        for (k = 0; k < (sa && sb ? 2u : 1u); k++, bi++) {
            uint32_t bsize = wsync__get_le32(p + table + 4 * bi);
            uint64_t f = bi * blk, len = nelem - f < blk ? nelem - f : blk, c = 0;
            if (bsize) {
                wsync_result r = wsync__rice_run(p + off, bsize, NULL, NULL, w, len, shrink ? room - *count : room, &c, why);
                if (r != WSYNC_OK) {
                    *bad_block = bi;
                    *bad_off = off;
                    return r;
                }
            }
            *count += c;
            off += bsize;
        }
    }
    return WSYNC_OK;
}

/* Patches block bi of a checked Rice stream (its bytes at stream offset
   `off`), reading the base from `base` (the whole tensor) and writing into
   `out`, which holds the block's elements. */
static wsync_result wsync__rice_patch_block(const wsync__patch *pt, uint64_t bi, uint64_t off,
                                            const uint8_t *base, uint8_t *out, uint64_t room, uint64_t *count,
                                            const char **why)
{
    uint32_t bsize = wsync__get_le32(pt->stream + pt->table_at + 4 * bi);
    uint64_t first = bi * pt->blk, len = pt->nelem - first < pt->blk ? pt->nelem - first : pt->blk;
    *count = 0;
    if (!bsize) return WSYNC_OK;
    return wsync__rice_run(pt->stream + off, bsize, base + first * pt->w, out, pt->w, len, room, count, why);
}

/* ==== packed-max (coders 2 and 3): range coder, classes, class-Rice ==== */

/* ---- packed-max: adaptive binary range coding with contexts from the base >>rc ----

   Every element gets a context class from its base value's exponent:
   class = clamp(top - exponent, 0, K-1), where `top` is the largest exponent
   in the tensor (stored in the stream). The bf16 spacing grows with |w|, so
   small weights (high classes) change far more often, and by larger steps.
   Positions are coded per class: the changes of class c are gaps between
   ranks in the subsequence of class-c elements, so each class gets the
   entropy of its own change rate. Values (zigzag steps) are coded with the
   element's class as context. All decisions go through an LZMA-style binary
   range coder whose probabilities adapt within a block and restart at every
   block, which keeps blocks independent. */

#define WSYNC__RC_BITS 11
#define WSYNC__RC_ONE (1u << WSYNC__RC_BITS)
#define WSYNC__RC_MOVE 5
#define WSYNC__MAX_CLASSES 12

typedef uint16_t wsync__prob;

/* Per-class adaptive models: counts, gap lengths, gap mantissas, and the
   value's small/sign decisions, length and mantissas. */
typedef struct wsync__ctx {
    wsync__prob count_len[WSYNC__MAX_CLASSES][64];
    wsync__prob count_mant[WSYNC__MAX_CLASSES][32][4];
    wsync__prob gap_len[WSYNC__MAX_CLASSES][32];
    wsync__prob gap_mant[WSYNC__MAX_CLASSES][32][4];
    wsync__prob val_small[WSYNC__MAX_CLASSES];
    wsync__prob val_sign[WSYNC__MAX_CLASSES];
    wsync__prob val_len[WSYNC__MAX_CLASSES][128];
    wsync__prob val_mant[WSYNC__MAX_CLASSES][66][4];
} wsync__ctx;

static void wsync__ctx_init(wsync__ctx *c)
{
    size_t i, n = sizeof *c / sizeof(wsync__prob);
    wsync__prob *p = (wsync__prob *)(void *)c;
    for (i = 0; i < n; i++) p[i] = WSYNC__RC_ONE / 2;
}

#ifndef WSYNC_NO_ENCODE
typedef struct wsync__rce {
    uint64_t low;
    uint32_t range;
    uint8_t cache;
    uint64_t cache_size;
    wsync__buf *out;
    int failed;
} wsync__rce;

static void wsync__rce_byte(wsync__rce *e, uint8_t b)
{
    if (!wsync__buf_reserve(e->out, 1)) {
        e->failed = 1;
        return;
    }
    e->out->p[e->out->len++] = b;
}

static void wsync__rce_shift(wsync__rce *e)
{
    if ((uint32_t)e->low < 0xFF000000u || (e->low >> 32) != 0) {
        uint8_t carry = (uint8_t)(e->low >> 32), temp = e->cache;
        do {
            wsync__rce_byte(e, (uint8_t)(temp + carry));
            temp = 0xFF;
        } while (--e->cache_size != 0);
        e->cache = (uint8_t)(e->low >> 24);
    }
    e->cache_size++;
    e->low = (e->low & 0x00FFFFFFu) << 8;
}

static void wsync__rce_bit(wsync__rce *e, wsync__prob *p, unsigned bit)
{
    uint32_t bound = (e->range >> WSYNC__RC_BITS) * *p;
    if (!bit) {
        e->range = bound;
        *p = (wsync__prob)(*p + ((WSYNC__RC_ONE - *p) >> WSYNC__RC_MOVE));
    } else {
        e->low += bound;
        e->range -= bound;
        *p = (wsync__prob)(*p - (*p >> WSYNC__RC_MOVE));
    }
    while (e->range < (1u << 24)) {
        e->range <<= 8;
        wsync__rce_shift(e);
    }
}

static void wsync__rce_direct(wsync__rce *e, uint64_t v, unsigned n)
{
    while (n--) {
        e->range >>= 1;
        if ((v >> n) & 1) e->low += e->range;
        while (e->range < (1u << 24)) {
            e->range <<= 8;
            wsync__rce_shift(e);
        }
    }
}

static void wsync__rce_flush(wsync__rce *e)
{
    int i;
    for (i = 0; i < 5; i++) wsync__rce_shift(e);
}
#endif /* WSYNC_NO_ENCODE */


/* The decoder reads from a copy of the block followed by WSYNC__RCD_PAD
   zero bytes, so that it never tests for the end inside a decision: one
   decision consumes at most one byte, one change at most 150, and the
   caller checks p against end after every change. Decisions are
   branch-free (the bits of a good code are unpredictable). */
#define WSYNC__RCD_PAD 256

typedef struct wsync__rcd {
    const uint8_t *p, *end;
    uint32_t range, code;
} wsync__rcd;

static void wsync__rcd_init(wsync__rcd *d, const uint8_t *padded, size_t n)
{
    int i;
    d->p = padded;
    d->end = padded + n;
    d->range = 0xFFFFFFFFu;
    d->code = 0;
    for (i = 0; i < 5; i++) d->code = (d->code << 8) | *d->p++;
}

WSYNC__INLINE void wsync__rcd_norm(wsync__rcd *d)
{
    uint32_t r8 = d->range << 8, c8 = (d->code << 8) | *d->p, n = d->range < (1u << 24);
    d->range = n ? r8 : d->range; /* cmov: one cycle on the chain */
    d->code = n ? c8 : d->code;
    d->p += n;
}

WSYNC__INLINE unsigned wsync__rcd_bit(wsync__rcd *d, wsync__prob *pp)
{
    uint32_t p = *pp, bound = (d->range >> WSYNC__RC_BITS) * p, bit = d->code >= bound, m = 0u - bit;
    uint32_t up = p + ((WSYNC__RC_ONE - p) >> WSYNC__RC_MOVE), down = p - (p >> WSYNC__RC_MOVE);
    /* selects by mask: compilers turn ?: here into (mispredicted) branches */
    d->code -= bound & m;
    d->range = bound ^ ((bound ^ (d->range - bound)) & m);
    *pp = (wsync__prob)(up ^ ((up ^ down) & m));
    wsync__rcd_norm(d);
    return bit;
}

/* The same decision with a branch: cheaper where the bit is predictable
   (the branch is then right, and the chain skips the selects). */
WSYNC__INLINE unsigned wsync__rcd_bit_likely(wsync__rcd *d, wsync__prob *pp)
{
    uint32_t p = *pp, bound = (d->range >> WSYNC__RC_BITS) * p;
    unsigned bit;
    if (d->code < bound) {
        d->range = bound;
        *pp = (wsync__prob)(p + ((WSYNC__RC_ONE - p) >> WSYNC__RC_MOVE));
        bit = 0;
    } else {
        d->code -= bound;
        d->range -= bound;
        *pp = (wsync__prob)(p - (p >> WSYNC__RC_MOVE));
        bit = 1;
    }
    wsync__rcd_norm(d);
    return bit;
}

WSYNC__INLINE uint64_t wsync__rcd_direct(wsync__rcd *d, unsigned n)
{
    uint64_t v = 0;
    while (n--) {
        uint32_t t;
        d->range >>= 1;
        t = (d->code - d->range) >> 31; /* 1 when code < range */
        d->code -= d->range & (t - 1);
        v = (v << 1) | (1 - t);
        wsync__rcd_norm(d);
    }
    return v;
}

#ifndef WSYNC_NO_ENCODE
/* An unsigned integer as: its bit length L through a binary tree of `depth`
   levels (adaptive), the two bits under the leading one (adaptive, by L),
   and the rest as direct bits. */
static void wsync__rce_uint(wsync__rce *e, wsync__prob *len_tree, wsync__prob (*mant)[4], unsigned depth,
                            uint64_t v)
{
    unsigned L = wsync__bitlen64(v), node = 1, i, rest;
    for (i = depth; i-- > 0;) {
        unsigned bit = (L >> i) & 1;
        wsync__rce_bit(e, &len_tree[node], bit);
        node = 2 * node + bit;
    }
    if (L <= 1) return;
    rest = L - 1; /* bits under the leading one */
    if (rest >= 1) wsync__rce_bit(e, &mant[L][0], (unsigned)(v >> (rest - 1)) & 1);
    if (rest >= 2) wsync__rce_bit(e, &mant[L][1 + ((v >> (rest - 1)) & 1)], (unsigned)(v >> (rest - 2)) & 1);
    if (rest >= 3) wsync__rce_direct(e, v, rest - 2);
}
#endif /* WSYNC_NO_ENCODE */


/* Reads what wsync__rce_uint wrote; sets *invalid for a length over 64. */
WSYNC__INLINE uint64_t wsync__rcd_uint(wsync__rcd *d, wsync__prob *len_tree, wsync__prob (*mant)[4], unsigned depth,
                                       int *invalid)
{
    unsigned node = 1, i, L, rest, b1, b2;
    uint64_t v;
    /* lengths stay under 8 in practice: the tree's levels above the last
       three are nearly always 0, and a branch decodes them faster */
    for (i = 0; i < depth; i++)
        node = 2 * node + (i + 3 < depth ? wsync__rcd_bit_likely(d, &len_tree[node])
                                         : wsync__rcd_bit(d, &len_tree[node]));
    L = node - (1u << depth);
    if (L <= 1) return L;
    if (L > 64) {
        *invalid = 1; /* no 64-bit value is this long */
        return 0;
    }
    rest = L - 1;
    b1 = wsync__rcd_bit(d, &mant[L][0]);
    v = 2 | b1;
    if (rest >= 2) {
        b2 = wsync__rcd_bit(d, &mant[L][1 + b1]);
        v = (v << 1) | b2;
    }
    if (rest >= 3) v = (v << (rest - 2)) | wsync__rcd_direct(d, rest - 2);
    return v;
}

/* ---- packed-max: classes, ranks and positions without sorting >>classes ----

   Both directions need the class of every element of a block as a byte
   (wsync__class_bytes, padded to whole superchunks of 256). The encoder
   turns each change's position into its rank within its class; the decoder
   turns ranks back into positions. Both count one class's members 256
   elements at a time, four 64-bit masks of "byte == class" each, and look
   inside the superchunk that holds the change; one class at a time, so the
   branches follow a single class's changes and predict well. The decoder
   reads every symbol of a block first (per class: the count, then each
   change's rank gap and value step), marks the positions it finds in a
   bitmap, and then reads the bitmap in position order to write the
   changes. There is no per-element scatter and no merge. */

#define WSYNC__PM_PAD 0xFFu /* class byte past the block's end: no class */

/* How base exponents map to classes: class = min(max(top - e, 0) >> shift,
   k - 1), and 0 for an all-ones exponent (inf, NaN). The range coder
   (coder 2) always has shift 0 and k 12, with top the tensor's largest
   finite exponent; the class-Rice coder's stream says its own. This
   encoder writes seven classes of two binades from three below the largest
   exponent, down to where small weights' change rate stops growing. Of the
   fixed rules tried it codes within 0.6% of the best on the generator's
   model and within 1.9% on the real trajectory; coder 2's rule in this
   coder is 5% larger on the first and 1.7% smaller on the second. The
   decoder's walk has a fifth fewer classes to follow. */
typedef struct wsync__cls_rule {
    unsigned top, k, shift;
} wsync__cls_rule;

static unsigned wsync__exp_max(wsync_dtype t)
{
    switch (t) {
    case WSYNC_DTYPE_BF16: case WSYNC_DTYPE_F32: return 0xFF;
    case WSYNC_DTYPE_F16: case WSYNC_DTYPE_F8_E5M2: return 0x1F;
    case WSYNC_DTYPE_F64: return 0x7FF;
    case WSYNC_DTYPE_F8_E4M3: return 0xF;
    default: return 0;
    }
}

/* Where a dtype's exponent field starts (wsync__exp_max is its mask). */
static unsigned wsync__exp_shift(wsync_dtype t)
{
    switch (t) {
    case WSYNC_DTYPE_BF16: return 7;
    case WSYNC_DTYPE_F16: return 10;
    case WSYNC_DTYPE_F32: return 23;
    case WSYNC_DTYPE_F64: return 52;
    case WSYNC_DTYPE_F8_E4M3: return 3;
    case WSYNC_DTYPE_F8_E5M2: return 2;
    default: return 0;
    }
}

/* Class bytes of a block, lut[exponent] each (wsync__class_lut), padded
   with WSYNC__PM_PAD to a multiple of 256. bf16 goes through SSE2 on x86
   (sixteen elements per step). */
/* cls[i] for i in [from, len), w-byte elements (w a constant once inlined). */
WSYNC__INLINE void wsync__class_bytes_w(uint8_t *cls, const uint8_t *base, const uint8_t *lut, unsigned shift,
                                       unsigned emask, uint64_t from, uint64_t len, unsigned w)
{
    uint64_t i;
    for (i = from; i < len; i++) cls[i] = lut[(wsync__elem_load(base + i * w, w) >> shift) & emask];
}

#if WSYNC__X86
/* bf16 class bytes for [0, len) rounded down to 32 elements, by the lut's
   rule (wsync__cls_rule); returns how many were done. */
WSYNC__AVX2 static uint64_t wsync__class_bytes_bf16_avx2(uint8_t *cls, const uint8_t *base, wsync__cls_rule rule,
                                                        uint64_t len)
{
    /* max(top - e, 0) as max(128 top - (u & 0x7F80), 0) >> 7, with the
       shift: an exponent of all ones (infinity, NaN) is at least top, so it
       lands in class 0 with no test of its own (top <= 255, as checked) */
    const __m256i emask = _mm256_set1_epi16(0x7F80), vtop = _mm256_set1_epi16((short)(rule.top << 7));
    const __m256i vmax = _mm256_set1_epi16((short)(rule.k - 1));
    const __m128i sh = _mm_cvtsi32_si128((int)rule.shift + 7);
    uint64_t i;
    for (i = 0; i + 32 <= len; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(base + 2 * i));
        /* 2 KiB ahead into L2, into the next run's base near a run's end:
           the walk and the emission between runs leave the hardware
           prefetcher behind, and the next run would wait on memory */
        wsync__prefetch_l2(base + 2 * i, 2048);
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(base + 2 * i + 32));
        __m256i ca = _mm256_min_epi16(_mm256_srl_epi16(_mm256_subs_epu16(vtop, _mm256_and_si256(a, emask)), sh), vmax);
        __m256i cb = _mm256_min_epi16(_mm256_srl_epi16(_mm256_subs_epu16(vtop, _mm256_and_si256(b, emask)), sh), vmax);
        /* packus works within 128-bit lanes: put the four quarters back in order */
        _mm256_storeu_si256((__m256i *)(void *)(cls + i), _mm256_permute4x64_epi64(_mm256_packus_epi16(ca, cb), 0xD8));
    }
    return i;
}
#endif

static void wsync__class_bytes(uint8_t *cls, const uint8_t *base, wsync_dtype dt, wsync__cls_rule rule,
                               const uint8_t *lut, uint64_t len)
{
    uint64_t i = 0, padded = (len + 255) & ~(uint64_t)255;
    unsigned shift = wsync__exp_shift(dt), emask = wsync__exp_max(dt);
    (void)rule; /* the SIMD path's form of the lut */
    switch (dt) {
    case WSYNC_DTYPE_BF16:
#if WSYNC__X86
    {
        /* the lut's rule (wsync__cls_rule) */
        const __m128i emask = _mm_set1_epi16(0x7F80), vtop = _mm_set1_epi16((short)(rule.top << 7));
        const __m128i vmax = _mm_set1_epi16((short)(rule.k - 1)), sh = _mm_cvtsi32_si128((int)rule.shift + 7);
        if (wsync__has_avx2()) i = wsync__class_bytes_bf16_avx2(cls, base, rule, len);
        for (; i + 16 <= len; i += 16) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(base + 2 * i));
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(base + 2 * i + 16));
            /* as in the AVX2 loop */
            __m128i ca = _mm_min_epi16(_mm_srl_epi16(_mm_subs_epu16(vtop, _mm_and_si128(a, emask)), sh), vmax);
            __m128i cb = _mm_min_epi16(_mm_srl_epi16(_mm_subs_epu16(vtop, _mm_and_si128(b, emask)), sh), vmax);
            _mm_storeu_si128((__m128i *)(void *)(cls + i), _mm_packus_epi16(ca, cb));
        }
    }
#endif
        break;
    default: break;
    }
    /* the rest (every dtype but bf16 on x86): the exponent field through
       the lut; integer dtypes have an empty field, so class 0 */
    switch (wsync_dtype_bits(dt)) {
    case 8: wsync__class_bytes_w(cls, base, lut, shift, emask, i, len, 1); break;
    case 16: wsync__class_bytes_w(cls, base, lut, shift, emask, i, len, 2); break;
    case 32: wsync__class_bytes_w(cls, base, lut, shift, emask, i, len, 4); break;
    default: wsync__class_bytes_w(cls, base, lut, shift, emask, i, len, 8); break;
    }
    memset(cls + len, WSYNC__PM_PAD, (size_t)(padded - len));
}

#define WSYNC__PM_RUN 32 /* superchunks per run of the walk: 16 KiB of bf16 base */
/* 64-bit words of rank bits for a block of len elements (wsync__pm_rank_bits) */
#define WSYNC__PM_RB_WORDS(len) (((len) + 13 * 256 + 128) / 64 + 2)

/* The position walk's state: per class, its changes [head, end) and the
   cursor of its values. */
typedef struct wsync__pm_walk {
    const uint64_t *zv;
    /* per class, its changes as bits by rank: rank k of class c is bit
       rb_at[c] + k of rb, which has zero bits from rb_end[c] (one past the
       last change) to rb_end[c] + 256 at least */
    const uint64_t *rb;
    uint64_t rb_at[WSYNC__MAX_CLASSES], rb_end[WSYNC__MAX_CLASSES];
    uint64_t cur[WSYNC__MAX_CLASSES]; /* the walk's place in each class's rank bits */
    unsigned act;                     /* bit c: class c has changes left to place */
    uint64_t head[WSYNC__MAX_CLASSES], end[WSYNC__MAX_CLASSES], vcur[WSYNC__MAX_CLASSES];
    const uint8_t *bb, *cls; /* the block's base and class bytes */
    unsigned w;
    uint64_t first, vmask, out;
    uint8_t *list;           /* the tensor's decoded changes (wsync__list_entry) */
    uint64_t lat, next;      /* the list's end; one past its last position */
} wsync__pm_walk;

/* A decoded packed-max change in the list an apply holds until its write
   phase: the gap from the change before (from element 0 for the first) as
   a byte, or 255 and the gap as 4 bytes where it is 255 or more, then the
   new value's w bytes. Three bytes a change for bf16 where a position and a
   value took six: the list's pages are fresh each apply, and the kernel
   zeroes each of them on first touch, so fewer bytes mean fewer pages to
   zero. Reads
   the entry at q into *at (next: one past the position before, updated);
   returns where its value starts. */
WSYNC__INLINE const uint8_t *wsync__list_entry(const uint8_t *q, uint64_t *next, uint64_t *at)
{
    uint64_t g = *q++;
    if (g == 255) {
        g = wsync__get_le32(q);
        q += 4;
    }
    *at = *next + g;
    *next = *at + 1;
    return q;
}

/* The list's bytes for n changes among nelem elements: a gap of 255 or more
   spans 256 elements, so at most nelem / 256 + 1 gaps take 4 bytes more;
   and 4 bytes past the last entry, which wsync__pm_emit may write. */
static uint64_t wsync__list_bound(uint64_t n, uint64_t nelem, unsigned w)
{
    return n * (1 + (uint64_t)w) + 4 * (nelem / 256 + 1) + 4;
}

/* Writes the marked changes in position order; a class's values are taken
   in the order its changes were coded. NULL, or why the block is bad. The
   element width w is a constant where this is inlined. Two passes over the
   run: the marks of hitmap[k0, k1) become positions (from 64 * k0, in pos,
   which has room for the run's elements and 4 more), four written per word
   whether it holds them or not, so that no branch depends on how many
   marks a word holds; then each position's change is written. At 1.6%
   density a word holds 0, 1 or 2 marks at random, and a loop over its marks
   would mispredict about once a word on real data (a benchmark that repeats
   one pattern hides this: the predictor learns it). */
WSYNC__INLINE const char *wsync__pm_emit(wsync__pm_walk *s, const uint64_t *hitmap, uint64_t k0, uint64_t k1,
                                         uint32_t *pos, unsigned w)
{
    /* the state in locals: the list is written through a byte pointer,
       which could alias s, and the compiler would reload s after each byte */
    const uint8_t *bb = s->bb + 64 * k0 * w, *cls = s->cls + 64 * k0;
    const uint64_t *zv = s->zv;
    uint8_t *list = s->list;
    uint64_t vmask = s->vmask, at0 = s->first + 64 * k0, lat = s->lat, next = s->next, k, j, n;
    uint64_t vcur[WSYNC__MAX_CLASSES], end[WSYNC__MAX_CLASSES];
    uint32_t *o = pos;
    unsigned c;
    for (c = 0; c < WSYNC__MAX_CLASSES; c++) {
        vcur[c] = s->vcur[c];
        end[c] = s->end[c];
    }
    for (k = 0; k < k1 - k0; k++) {
        /* bit 63 set keeps ctz defined once h runs out; those slots are
           overwritten or past the count */
        uint64_t h = hitmap[k0 + k], top = (uint64_t)1 << 63;
        unsigned b = 64 * (unsigned)k, cnt = wsync__popcount64(h);
        o[0] = (uint32_t)(b + wsync__ctz64(h | top));
        h &= h - 1;
        o[1] = (uint32_t)(b + wsync__ctz64(h | top));
        h &= h - 1;
        o[2] = (uint32_t)(b + wsync__ctz64(h | top));
        h &= h - 1;
        o[3] = (uint32_t)(b + wsync__ctz64(h | top));
        h &= h - 1;
        if (cnt > 4) {
            uint32_t *q = o + 4;
            while (h) {
                *q++ = (uint32_t)(b + wsync__ctz64(h));
                h &= h - 1;
            }
        }
        o += cnt;
    }
    n = (uint64_t)(o - pos);
    for (j = 0; j < n; j++) {
        uint64_t at = pos[j], b = wsync__elem_load(bb + at * w, w), d, x, g = at0 + at - next;
        c = cls[at];
        if (vcur[c] == end[c]) return "more changes than the class holds"; /* cannot happen */
        d = wsync__ord(b, w) + wsync__unzz(zv[vcur[c]++]);
        x = wsync__unord(d, w);
        if ((d & vmask) != d) return "value step leaves the dtype's range";
        if (x == b) return "a listed element does not change";
        /* the escape's four bytes are written always (the list has room) and
           kept where the gap needs them */
        list[lat] = (uint8_t)(g < 255 ? g : 255);
        wsync__put_le32(list + lat + 1, (uint32_t)g);
        lat += g < 255 ? 1 : 5;
        wsync__elem_store(list + lat, w, x);
        lat += w;
        next = at0 + at + 1;
    }
    for (c = 0; c < WSYNC__MAX_CLASSES; c++) s->vcur[c] = vcur[c];
    s->lat = lat;
    s->next = next;
    s->out += n;
    return NULL;
}

/* The rank bits (wsync__pm_walk's rb) from the rank gaps of each class's
   changes, gap[head[c] .. end[c]); rb has room for len + 13 * 256 + 128
   bits. NULL, or why the ranks cannot fit: all classes together have len
   members, so the ranks of a good block need at most len bits. */
static const char *wsync__pm_rank_bits(wsync__pm_walk *s, const uint32_t *gap, uint64_t len, uint64_t *rb)
{
    uint64_t at = 0, j;
    unsigned c;
    s->act = 0;
    for (c = 0; c < WSYNC__MAX_CLASSES; c++) {
        uint64_t p = at, limit = len + 256 * (uint64_t)c; /* ranks so far, past the padding before class c */
        s->rb_at[c] = at;
        for (j = s->head[c]; j < s->end[c]; j++) {
            p += gap[j];
            if (p >= limit) return "rank past its class";
            rb[p >> 6] |= (uint64_t)1 << (p & 63);
            p++;
        }
        s->rb_end[c] = p;
        s->cur[c] = s->rb_at[c];
        s->act |= (unsigned)(s->rb_at[c] < p) << c;
        at = p + 256;
    }
    return NULL;
}

/* The n <= 64 rank bits from bit p on (the bits above n are the next ones). */
WSYNC__INLINE uint64_t wsync__pm_rank_window(const uint64_t *rb, uint64_t p)
{
    /* 63 - (p & 63) as ~p & 63: x86 shifts mask their count the same way */
    return (rb[p >> 6] >> (p & 63)) | ((rb[(p >> 6) + 1] << 1) << (~p & 63));
}

/* The rank bits from bit p on for a mask of n members: n <= 57 bits come
   from one unaligned load at byte p / 8 (x86 is little-endian, so byte
   order is bit order), which takes half the instructions of the two-word
   window; more from the window. */
WSYNC__INLINE uint64_t wsync__pm_rank_window_n(const uint64_t *rb, uint64_t p, unsigned n)
{
#if WSYNC__X86
    if (n <= 57) {
        uint64_t v;
        memcpy(&v, (const uint8_t *)(const void *)rb + (p >> 3), 8);
        return v >> (p & 7);
    }
#endif
    (void)n;
    return wsync__pm_rank_window(rb, p);
}

/* pdep where the instruction is missing or slow: the low popcount(m) bits
   of v (here nearly all zero) deposited at m's set bits. */
WSYNC__INLINE uint64_t wsync__pdep_soft(uint64_t v, uint64_t m)
{
    uint64_t res = 0;
    unsigned n = wsync__popcount64(m);
    v = n >= 64 ? v : v & ((((uint64_t)1) << n) - 1);
    while (v) {
        unsigned k = wsync__ctz64(v);
        uint64_t mm = m;
        v &= v - 1;
        while (k--) mm &= mm - 1;
        res |= mm & (0 - mm);
    }
    return res;
}

/* Two words of class c's members from the class bytes at qq deposited
   into ha and hb, from rank bit p on (advanced past them): where both
   words' members fit in one read's 57 sure bits, the second word's rank
   bits are the rest of the first one's (one load instead of two), else a
   read each. */
#define WSYNC__PM_DEP2(rb, p, qq, c, ha, hb, MASK64, POPCNT, PDEP)                                 \
    do {                                                                                          \
        uint64_t ma_ = MASK64(qq, c), mb_ = MASK64((qq) + 64, c);                                 \
        unsigned na_ = (unsigned)POPCNT(ma_), nb_ = (unsigned)POPCNT(mb_);                        \
        if (na_ + nb_ <= 57) {                                                                    \
            uint64_t w_ = wsync__pm_rank_window_n(rb, p, 57);                                     \
            ha |= PDEP(w_, ma_);                                                                  \
            hb |= PDEP(w_ >> na_, mb_);                                                           \
        } else {                                                                                  \
            ha |= PDEP(wsync__pm_rank_window_n(rb, p, na_), ma_);                                 \
            hb |= PDEP(wsync__pm_rank_window_n(rb, (p) + na_, nb_), mb_);                         \
        }                                                                                         \
        p += na_ + nb_;                                                                           \
    } while (0)

/* The walk's prefetch, one run ahead: the base of superchunk sc +
   WSYNC__PM_RUN (the next run's, or the next block's near a block's end)
   into L2, while this superchunk is walked. The walk is bound by its
   instructions and leaves memory idle, so the next run's class bytes then
   read the base from L2 instead of waiting on memory. */
WSYNC__INLINE void wsync__pm_prefetch_run(const wsync__pm_walk *s, uint64_t sc)
{
    size_t from = (size_t)((sc + WSYNC__PM_RUN) * 256 * s->w), l;
    for (l = 0; l < 256 * (size_t)s->w; l += 64) wsync__prefetch_l2(s->bb, from + l);
}

/* The walk, superchunks sc0 to sc1 (a run of them at a time, so that the
   base and class bytes are still in cache when the run's changes are
   written): each class with changes left counts its members among the 256
   (four 64-bit masks of "byte == class") and deposits its next rank bits on
   them, so a change costs no branch and no search. The state carries over
   in s (cur, act); a class still active after the block's last superchunk
   had fewer members than its ranks need. MASK64(p, c) is the mask of bytes
   equal to c among the 64 at p; one instance per code path. */
#define WSYNC__PM_WALK(NAME, ATTR, MASK64, POPCNT, PDEP)                                           \
    ATTR static void NAME(wsync__pm_walk *s, const uint8_t *cls, uint64_t sc0, uint64_t sc1,       \
                          uint64_t *hitmap)                                                        \
    {                                                                                             \
        const uint64_t *rb = s->rb;                                                               \
        uint64_t sc;                                                                              \
        unsigned c, act = s->act;                                                                 \
        for (sc = sc0; sc < sc1 && act; sc++) {                                                   \
            const uint8_t *q = cls + 256 * sc;                                                    \
            uint64_t h0 = 0, h1 = 0, h2 = 0, h3 = 0; /* in registers: hitmap might alias rb */   \
            unsigned a = act;                                                                     \
            wsync__pm_prefetch_run(s, sc);                                                        \
            while (a) {                                                                           \
                uint64_t p;                                                                       \
                c = (unsigned)wsync__ctz64(a);                                                    \
                a &= a - 1;                                                                       \
                /* a pair of words at a time, so that few values are live at once */            \
                p = s->cur[c];                                                                    \
                WSYNC__PM_DEP2(rb, p, q, c, h0, h1, MASK64, POPCNT, PDEP);                        \
                WSYNC__PM_DEP2(rb, p, q + 128, c, h2, h3, MASK64, POPCNT, PDEP);                  \
                s->cur[c] = p;                                                                    \
                if (p >= s->rb_end[c]) act &= ~(1u << c); /* rare: a branch, not a mask */        \
            }                                                                                     \
            hitmap[4 * sc] = h0;                                                                  \
            hitmap[4 * sc + 1] = h1;                                                              \
            hitmap[4 * sc + 2] = h2;                                                              \
            hitmap[4 * sc + 3] = h3;                                                              \
        }                                                                                         \
        for (; sc < sc1; sc++) hitmap[4 * sc] = hitmap[4 * sc + 1] = hitmap[4 * sc + 2] = hitmap[4 * sc + 3] = 0; \
        s->act = act;                                                                             \
    }

/* The 64-bit mask of class c among 64 class bytes, per code path. The
   portable one works on 8 bytes at a time: v holds them XOR c, t gets bit 7
   of each byte of v that is zero (exact: (v & 0x7F) + 0x7F sets bit 7 of a
   byte whose low bits are not all zero and carries no further, v's own bit
   7 covers the rest), and the multiply gathers those eight bits into the top
   byte (bit 8k times 2^(56 - 7k) lands on bit 56 + k; the other products
   fall on distinct bits below 56 or past 63, so nothing carries). A byte at
   a time, the portable packed-max apply took 0.54-0.69 us a change on an
   Intel Xeon (family 6 model 207), 0.02 of a bare scatter, and 0.18-0.19
   us this way: BENCHMARKS.md. */
WSYNC__INLINE uint64_t wsync__cmask_scalar(const uint8_t *p, unsigned c)
{
    const uint64_t lo7 = 0x7F7F7F7F7F7F7F7Full, cc = 0x0101010101010101ull * (uint8_t)c;
    uint64_t m = 0;
    unsigned j;
    for (j = 0; j < 8; j++) {
        uint64_t v = wsync__le64(p + 8 * j) ^ cc, t = ~(((v & lo7) + lo7) | v | lo7);
        m |= ((t >> 7) * 0x0102040810204080ull >> 56) << (8 * j);
    }
    return m;
}
WSYNC__PM_WALK(wsync__pm_walk_scalar, , wsync__cmask_scalar, wsync__popcount64, wsync__pdep_soft)

#if WSYNC__X86
WSYNC__INLINE uint64_t wsync__cmask_sse2(const uint8_t *p, unsigned c)
{
    __m128i cc = _mm_set1_epi8((char)c);
    return (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)p), cc)) |
           (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(p + 16)), cc)) << 16 |
           (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(p + 32)), cc)) << 32 |
           (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(p + 48)), cc)) << 48;
}
WSYNC__PM_WALK(wsync__pm_walk_sse2, , wsync__cmask_sse2, wsync__popcount64, wsync__pdep_soft)

#define WSYNC__CMASK_AVX2(p, c)                                                                                    \
    ((uint64_t)(uint32_t)_mm256_movemask_epi8(                                                                     \
         _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(p)), _mm256_set1_epi8((char)(c)))) | \
     (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(                                                   \
         _mm256_loadu_si256((const __m256i *)(const void *)((p) + 32)), _mm256_set1_epi8((char)(c)))) << 32)
WSYNC__PM_WALK(wsync__pm_walk_avx2, __attribute__((target("avx2,popcnt"))), WSYNC__CMASK_AVX2, _mm_popcnt_u64,
               wsync__pdep_soft)
WSYNC__PM_WALK(wsync__pm_walk_avx2_pdep, __attribute__((target("avx2,popcnt,bmi2"))), WSYNC__CMASK_AVX2,
               _mm_popcnt_u64, _pdep_u64)

#define WSYNC__CMASK_AVX512(p, c) \
    ((uint64_t)_mm512_cmpeq_epi8_mask(_mm512_loadu_si512((const void *)(p)), _mm512_set1_epi8((char)(c))))
WSYNC__PM_WALK(wsync__pm_walk_avx512, __attribute__((target("avx512f,avx512bw,popcnt,bmi2"))), WSYNC__CMASK_AVX512,
               _mm_popcnt_u64, _pdep_u64)
#endif

typedef void (*wsync__pm_walk_fn)(wsync__pm_walk *s, const uint8_t *cls, uint64_t sc0, uint64_t sc1, uint64_t *hitmap);

/* The walk for a code path (AUTO: the best the CPU has); NULL when the path
   is not compiled in or the CPU lacks it. AVX2 and AVX-512 deposit with
   pdep where it is fast, AVX2 with a loop elsewhere. */
static wsync__pm_walk_fn wsync__pm_walk_pick(wsync_impl impl)
{
    if (!wsync__impl_available(impl)) return NULL;
    switch (impl) {
#if WSYNC__X86
    case WSYNC_IMPL_AUTO:
        return wsync__has_avx512bw() && wsync__pdep_fast() ? wsync__pm_walk_avx512
               : wsync__has_avx2()                         ? wsync__pm_walk_pick(WSYNC_IMPL_AVX2)
                                                           : wsync__pm_walk_sse2;
    case WSYNC_IMPL_SSE2: return wsync__pm_walk_sse2;
    case WSYNC_IMPL_AVX2: return wsync__pdep_fast() ? wsync__pm_walk_avx2_pdep : wsync__pm_walk_avx2;
    case WSYNC_IMPL_AVX512: return wsync__pdep_fast() ? wsync__pm_walk_avx512 : NULL;
#else
    case WSYNC_IMPL_AUTO:
#endif
    case WSYNC_IMPL_SCALAR: return wsync__pm_walk_scalar;
    default: return NULL;
    }
}

#ifndef WSYNC_NO_ENCODE
/* The rank of each change within its class (how many elements of its class
   come before it in the block), for the changes grouped by class in
   by_class[n_in[c] .. n_in[c+1]), each group ascending: the class's
   members are counted 256 at a time up to each change. */
#define WSYNC__PM_RANKS(NAME, ATTR, MASK64, POPCNT)                                                          \
    ATTR static void NAME(const uint8_t *cls, const uint32_t *by_class, const uint32_t *n_in, uint32_t *rank) \
    {                                                                                                        \
        unsigned c;                                                                                          \
        for (c = 0; c < WSYNC__MAX_CLASSES; c++) {                                                           \
            uint64_t sc = 0, before = 0;                                                                     \
            uint32_t j;                                                                                      \
            for (j = n_in[c]; j < n_in[c + 1]; j++) {                                                        \
                uint32_t p = by_class[j], piece;                                                             \
                const uint8_t *q;                                                                            \
                uint64_t r;                                                                                  \
                for (; sc < p / 256; sc++) {                                                                 \
                    q = cls + 256 * sc;                                                                      \
                    before += (uint64_t)POPCNT(MASK64(q, c)) + POPCNT(MASK64(q + 64, c)) +                   \
                              POPCNT(MASK64(q + 128, c)) + POPCNT(MASK64(q + 192, c));                       \
                }                                                                                            \
                q = cls + 256 * sc;                                                                          \
                r = before;                                                                                  \
                for (piece = 0; piece < (p % 256) / 64; piece++) r += POPCNT(MASK64(q + 64 * piece, c));     \
                r += POPCNT(MASK64(q + 64 * piece, c) & ((((uint64_t)1) << (p % 64)) - 1));                 \
                rank[j] = (uint32_t)r;                                                                       \
            }                                                                                                \
        }                                                                                                    \
    }

WSYNC__PM_RANKS(wsync__pm_ranks_scalar, , wsync__cmask_scalar, wsync__popcount64)
#if WSYNC__X86
WSYNC__PM_RANKS(wsync__pm_ranks_sse2, , wsync__cmask_sse2, wsync__popcount64)
WSYNC__PM_RANKS(wsync__pm_ranks_avx2, __attribute__((target("avx2,popcnt"))), WSYNC__CMASK_AVX2, _mm_popcnt_u64)
WSYNC__PM_RANKS(wsync__pm_ranks_avx512, __attribute__((target("avx512f,avx512bw,popcnt"))), WSYNC__CMASK_AVX512,
                _mm_popcnt_u64)
#endif

typedef void (*wsync__pm_ranks_fn)(const uint8_t *cls, const uint32_t *by_class, const uint32_t *n_in,
                                   uint32_t *rank);

/* The rank function for a code path (AUTO: the best the CPU has); NULL when
   the path is not compiled in or the CPU lacks it. */
static wsync__pm_ranks_fn wsync__pm_ranks_pick(wsync_impl impl)
{
    if (!wsync__impl_available(impl)) return NULL;
    switch (impl) {
#if WSYNC__X86
    case WSYNC_IMPL_AUTO:
        return wsync__has_avx512bw() ? wsync__pm_ranks_avx512 : wsync__has_avx2() ? wsync__pm_ranks_avx2
                                                                                : wsync__pm_ranks_sse2;
    case WSYNC_IMPL_SSE2: return wsync__pm_ranks_sse2;
    case WSYNC_IMPL_AVX2: return wsync__pm_ranks_avx2;
    case WSYNC_IMPL_AVX512: return wsync__pm_ranks_avx512;
#else
    case WSYNC_IMPL_AUTO:
#endif
    case WSYNC_IMPL_SCALAR: return wsync__pm_ranks_scalar;
    default: return NULL;
    }
}
#endif /* WSYNC_NO_ENCODE */


/* The class of every exponent value (the LUT both directions use). */
static void wsync__class_lut(uint8_t *lut, wsync_dtype dt, wsync__cls_rule r)
{
    unsigned e, emax = wsync__exp_max(dt);
    for (e = 0; e <= emax; e++) {
        unsigned d = e == emax && emax ? 0 : (r.top > e ? r.top - e : 0) >> r.shift;
        lut[e] = (uint8_t)(d < r.k ? d : r.k - 1);
    }
}

#ifndef WSYNC_NO_ENCODE
/* The rule an encoder writes for coder `coder` and a tensor whose largest
   finite exponent is emax. */
static wsync__cls_rule wsync__cls_rule_for(int coder, unsigned emax)
{
    wsync__cls_rule r;
    r.top = emax;
    r.k = WSYNC__MAX_CLASSES;
    r.shift = 0;
    if (coder == WSYNC__CODER_CRICE) {
        r.top = emax > 3 ? emax - 3 : 0;
        r.k = 7;
        r.shift = 1;
    }
    return r;
}

/* Both packed-max coders' first step: the block's class bytes, its changes
   grouped by class (s->by_class, class c's at [n_in[c], n_in[c+1]), each
   group ascending) and each change's rank within its class (s->rank). */
static void wsync__pm_group(const uint8_t *base, wsync_dtype dt, wsync__cls_rule rule, uint64_t len,
                            const uint32_t *pos, size_t count, wsync__encblk *s, uint32_t *n_in)
{
    uint32_t fill[WSYNC__MAX_CLASSES];
    uint8_t lut[2048];
    size_t i;
    unsigned c;
    wsync__class_lut(lut, dt, rule);
    wsync__class_bytes(s->cls, base, dt, rule, lut, len);
    memset(n_in, 0, (WSYNC__MAX_CLASSES + 1) * sizeof *n_in);
    for (i = 0; i < count; i++) n_in[s->cls[pos[i]] + 1]++;
    for (c = 0; c < WSYNC__MAX_CLASSES; c++) n_in[c + 1] += n_in[c];
    memcpy(fill, n_in, sizeof fill);
    for (i = 0; i < count; i++) s->by_class[fill[s->cls[pos[i]]]++] = pos[i];
    wsync__pm_ranks_pick(WSYNC_IMPL_AUTO)(s->cls, s->by_class, n_in, s->rank);
}

/* ---- packed-max (coder 2): the range-coded block encoder >>rc-enc ---- */

/* Encodes one block's changes (positions relative to the block) with the
   range coder (coder 2). */
static int wsync__arith_block(wsync__buf *out, const uint8_t *base, const uint8_t *next, unsigned w,
                              wsync_dtype dt, wsync__cls_rule rule, uint64_t len, const uint32_t *pos, size_t count,
                              wsync__encblk *s)
{
    wsync__rce e;
    uint32_t n_in[WSYNC__MAX_CLASSES + 1];
    const uint32_t *by_class = s->by_class, *rank = s->rank;
    wsync__ctx *ctx = s->ctx;
    unsigned c;
    wsync__pm_group(base, dt, rule, len, pos, count, s, n_in);
    wsync__ctx_init(ctx);
    e.low = 0;
    e.range = 0xFFFFFFFFu;
    e.cache = 0;
    e.cache_size = 1;
    e.out = out;
    e.failed = 0;
    for (c = 0; c < WSYNC__MAX_CLASSES; c++) {
        uint32_t j, prev = 0;
        wsync__rce_uint(&e, ctx->count_len[c], ctx->count_mant[c], 5, n_in[c + 1] - n_in[c]);
        for (j = n_in[c]; j < n_in[c + 1]; j++) {
            uint32_t p = by_class[j], r = rank[j];
            uint64_t b = wsync__elem_load(base + (size_t)p * w, w), x = wsync__elem_load(next + (size_t)p * w, w);
            uint64_t z = wsync__zz(wsync__ord(x, w) - wsync__ord(b, w));
            wsync__rce_uint(&e, ctx->gap_len[c], ctx->gap_mant[c], 5, r - prev);
            prev = r + 1;
            if (z < 2) {
                wsync__rce_bit(&e, &ctx->val_small[c], 0);
                wsync__rce_bit(&e, &ctx->val_sign[c], (unsigned)z);
            } else {
                wsync__rce_bit(&e, &ctx->val_small[c], 1);
                wsync__rce_uint(&e, ctx->val_len[c], ctx->val_mant[c], 7, z);
            }
        }
    }
    wsync__rce_flush(&e);
    return !e.failed;
}

#endif /* WSYNC_NO_ENCODE */

/* ---- packed-max (coder 2): the range-coded block decoder, its symbol reader >>rc-dec ---- */

/* Reading a block's symbols: the counts of each class, then per change its
   rank gap and value step, into gap[] and zv[] class after class. */
typedef struct wsync__pm_sym {
    wsync__rcd d;
    wsync__ctx *ctx;
    uint32_t *gap;          /* per change: its rank gap within its class */
    uint64_t *zv;           /* per change: its zigzag value step */
    uint64_t *seg;          /* WSYNC__MAX_CLASSES + 1 starts */
    uint64_t len, room, total, next, left;
    unsigned c;             /* class being read */
    int invalid;
    const char *why;
    wsync_result r;
} wsync__pm_sym;

WSYNC__INLINE int wsync__pm_sym_fail(wsync__pm_sym *s, wsync_result r, const char *why)
{
    s->r = r;
    s->why = why;
    return 0;
}

/* Reads class counts up to the next class with changes: 1 when there is
   one, 0 at the end of the block (s->r says whether it is good). */
WSYNC__INLINE int wsync__pm_sym_open(wsync__pm_sym *s)
{
    for (; s->c < WSYNC__MAX_CLASSES; s->c++) {
        wsync__ctx *x = s->ctx;
        uint64_t n = wsync__rcd_uint(&s->d, x->count_len[s->c], x->count_mant[s->c], 5, &s->invalid);
        s->seg[s->c] = s->total;
        if (s->d.p > s->d.end) return wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "stream ends early");
        if (n > s->len - s->total || n > s->room - s->total)
            return wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "class change count too large");
        if (n) {
            s->left = n;
            s->next = 0;
            return 1;
        }
    }
    s->seg[WSYNC__MAX_CLASSES] = s->total;
    if (s->d.p != s->d.end)
        return wsync__pm_sym_fail(s, WSYNC_ERR_TRAILING_BYTES, "bytes left over after the block's changes");
    if (s->total == 0) return wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "a stored block without changes");
    return 0;
}

/* Reads one change: 1 while the block has more. */
WSYNC__INLINE int wsync__pm_sym_step(wsync__pm_sym *s)
{
    wsync__ctx *x = s->ctx;
    unsigned c = s->c;
    uint64_t g = wsync__rcd_uint(&s->d, x->gap_len[c], x->gap_mant[c], 5, &s->invalid), z;
    if (!wsync__rcd_bit_likely(&s->d, &x->val_small[c])) z = wsync__rcd_bit(&s->d, &x->val_sign[c]);
    else {
        z = wsync__rcd_uint(&s->d, x->val_len[c], x->val_mant[c], 7, &s->invalid);
        if (z < 2 || s->invalid) return wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "invalid value code");
    }
    if (s->d.p > s->d.end) return wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "stream ends early");
    if (g >= s->len - s->next) return wsync__pm_sym_fail(s, WSYNC_ERR_OUT_OF_BOUNDS, "rank past its class");
    s->next += g + 1;
    s->gap[s->total] = (uint32_t)g;
    s->zv[s->total] = z;
    s->total++;
    if (--s->left) return 1;
    s->c++;
    return wsync__pm_sym_open(s);
}

/* Starts reading a block (copied into padded, which has room for
   WSYNC__RCD_PAD more bytes); s->r says whether it can go on. */
static void wsync__pm_sym_begin(wsync__pm_sym *s, const uint8_t *p, size_t size, uint8_t *padded, uint64_t len,
                                uint64_t room)
{
    s->r = WSYNC_OK;
    s->why = NULL;
    s->len = len;
    s->room = room;
    s->total = 0;
    s->next = 0;
    s->left = 0;
    s->c = 0;
    s->invalid = 0;
    memset(&s->d, 0, sizeof s->d);
    if (p[0] != 0) {
        wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "range coder stream must start with a zero byte");
        return;
    }
    memcpy(padded, p, size);
    memset(padded + size, 0, WSYNC__RCD_PAD);
    wsync__ctx_init(s->ctx);
    wsync__rcd_init(&s->d, padded, size);
}

/* Reads the symbols of one block. (Reading two blocks in turns, for two
   independent chains, gains nothing: the branches on each change's lengths
   mispredict and flush both.) */
static void wsync__pm_symbols(wsync__pm_sym *a)
{
    wsync__pm_sym s = *a;
    int go = s.r == WSYNC_OK && wsync__pm_sym_open(&s);
    while (go) go = wsync__pm_sym_step(&s);
    *a = s;
}

/* ---- packed-max: the class-Rice coder (coder 3), its encoder >>crice-enc ----

   The range coder's model (classes from the base, rank gaps within a
   class, values by class) with prefix codes, which decode without its
   serial chain of adaptive decisions. A block is one bit stream, least
   significant bit first like a Rice block, padded with zero bits to a byte,
   ending exactly at the block's end. For each class 0 to k - 1 (the
   stream's class rule, wsync__cls_rule): the number n
   of its changes as a count; where n > 0, 5 bits kg (0..24) and the n rank
   gaps as Rice codes with kg (the gap escape of coder 1), then the values.
   Most steps are one (z = 0 or 1); the others (z >= 2) are "escaped": their
   number as a count and, where there are any, 5 bits ke (0..24), 5 bits km
   and the class index of the first as a Rice gap with ke. Then change by
   change in class order: one bit, z, for a step of one; for an escaped
   change, z - 2 as a Rice code with km (at a quotient of 16: 16 one-bits
   and z - 2 raw in 8w + 1 bits, 64 for 8-byte elements), followed, unless
   it was the last, by the gap to the next escaped index with ke. A count is
   5 bits L, its bit length (0 for none), then the L - 1 bits under the
   leading one. Coding the escapes as a sparse subset of the class's changes
   costs near their entropy, where a code per value could not go under two
   bits for a step of one. */

#define WSYNC__CR_KMAX 24 /* largest gap parameter (ke too) */

WSYNC__INLINE unsigned wsync__cr_raw_bits(unsigned w)
{
    return w == 8 ? 64 : 8 * w + 1; /* z < 2^(8w + 1) below 8 bytes */
}
#ifndef WSYNC_NO_ENCODE

static void wsync__bw_count(wsync__bw *bw, uint64_t n)
{
    unsigned L = wsync__bitlen64(n);
    wsync__bw_put(bw, L, 5);
    if (L > 1) wsync__bw_put(bw, n & (((uint64_t)1 << (L - 1)) - 1), L - 1);
}

/* A gap (below 2^32) as a Rice code with k, or 32 one-bits and 32 raw bits. */
WSYNC__INLINE void wsync__bw_gap(wsync__bw *bw, uint64_t g, unsigned k)
{
    uint64_t q = g >> k;
    if (q < WSYNC__GAP_ESCAPE) {
        wsync__bw_rice(bw, g, q, k);
    } else {
        wsync__bw_put(bw, 0xFFFFFFFFu, 32);
        wsync__bw_put(bw, g, 32);
    }
}

/* v as a Rice code with k, or 16 one-bits and v in `raw` bits. */
WSYNC__INLINE void wsync__bw_esc_value(wsync__bw *bw, uint64_t v, unsigned k, unsigned raw)
{
    uint64_t q = v >> k;
    if (q < WSYNC__VAL_ESCAPE) {
        wsync__bw_rice(bw, v, q, k);
    } else {
        wsync__bw_put(bw, 0xFFFFu, WSYNC__VAL_ESCAPE);
        if (raw > 32) {
            wsync__bw_put(bw, v & 0xFFFFFFFFu, 32);
            wsync__bw_put(bw, v >> 32, raw - 32);
        } else {
            wsync__bw_put(bw, v, raw);
        }
    }
}

/* Encodes one block's changes (positions relative to the block). */
static int wsync__crice_block(wsync__buf *out, const uint8_t *base, const uint8_t *next, unsigned w,
                              wsync_dtype dt, wsync__cls_rule rule, uint64_t len, const uint32_t *pos, size_t count,
                              wsync__encblk *s)
{
    uint32_t n_in[WSYNC__MAX_CLASSES + 1];
    const unsigned raw = wsync__cr_raw_bits(w);
    const uint64_t cap = (uint64_t)1 << 40;
    unsigned c;
    size_t j;
    wsync__bw bw;
    wsync__pm_group(base, dt, rule, len, pos, count, s, n_in);
    for (j = 0; j < count; j++) {
        uint32_t p = s->by_class[j];
        uint64_t b = wsync__elem_load(base + (size_t)p * w, w), x = wsync__elem_load(next + (size_t)p * w, w);
        s->zv[j] = wsync__zz(wsync__ord(x, w) - wsync__ord(b, w));
    }
    /* at most per change: a 64-bit gap, 16 + 64 bits of value and a 64-bit
       escape gap; per class 5 + 24 + 5 + 5 + 24 + 5 + 5 bits; and the
       writer's 8 bytes of slack */
    if (!wsync__buf_reserve(out, count * 26 + WSYNC__MAX_CLASSES * 10 + 16)) return 0;
    bw.out = out->p + out->len;
    bw.acc = 0;
    bw.n = 0;
    for (c = 0; c < rule.k; c++) {
        size_t a = n_in[c], e = n_in[c + 1], n = e - a, ne = 0, last = a, nx;
        uint64_t cnt[65], sum[65], prev = 0;
        unsigned kg, ke, km;
        wsync__bw_count(&bw, n);
        if (!n) continue;
        kg = wsync__rice_k_geometric((uint64_t)s->rank[e - 1] + 1 - n, n);
        wsync__bw_put(&bw, kg, 5);
        for (j = a; j < e; j++) {
            wsync__bw_gap(&bw, s->rank[j] - prev, kg);
            prev = (uint64_t)s->rank[j] + 1;
        }
        memset(cnt, 0, sizeof cnt);
        memset(sum, 0, sizeof sum);
        for (j = a; j < e; j++)
            if (s->zv[j] >= 2) {
                uint64_t v = s->zv[j] - 2;
                unsigned L = wsync__bitlen64(v);
                cnt[L]++;
                sum[L] += v < cap ? v : cap;
                ne++;
                last = j;
            }
        wsync__bw_count(&bw, ne);
        if (!ne) {
            for (j = a; j < e; j++) wsync__bw_put(&bw, s->zv[j], 1);
            continue;
        }
        ke = wsync__rice_k_geometric(last - a + 1 - ne, ne);
        km = wsync__rice_pick(cnt, sum, WSYNC__VAL_ESCAPE, raw, 31);
        wsync__bw_put(&bw, ke, 5);
        wsync__bw_put(&bw, km, 5);
        for (nx = a; s->zv[nx] < 2; nx++) {}
        wsync__bw_gap(&bw, nx - a, ke);
        for (j = a; j < e; j++) {
            if (j != nx) {
                wsync__bw_put(&bw, s->zv[j], 1);
                continue;
            }
            wsync__bw_esc_value(&bw, s->zv[j] - 2, km, raw);
            if (--ne == 0) continue; /* nx stays behind j: the rest are steps of one */
            for (nx = j + 1; s->zv[nx] < 2; nx++) {}
            wsync__bw_gap(&bw, nx - (j + 1), ke);
        }
    }
    wsync__bw_flush(&bw);
    out->len = (size_t)(bw.out - out->p);
    return 1;
}

#endif /* WSYNC_NO_ENCODE */

/* ---- packed-max (coder 3): the class-Rice block reader >>crice-dec ---- */

/* The reader: a bit position in a padded copy of the block (WSYNC__RCD_PAD
   zero bytes after it). Every read loads the 8 bytes at bp / 8; the decoder
   checks bp against the block's end after every change, and no change reads
   more than 26 bytes, so reads stay inside the padding. */
WSYNC__INLINE uint64_t wsync__cr_peek(const uint8_t *p, uint64_t bp)
{
    return wsync__le64(p + (bp >> 3)) >> (bp & 7); /* 57 bits or more */
}

WSYNC__INLINE uint64_t wsync__cr_bits(const uint8_t *p, uint64_t *bp, unsigned n) /* n <= 56 */
{
    uint64_t v = wsync__cr_peek(p, *bp) & ((((uint64_t)1) << n) - 1);
    *bp += n;
    return v;
}

WSYNC__INLINE uint64_t wsync__cr_count(const uint8_t *p, uint64_t *bp)
{
    unsigned L = (unsigned)wsync__cr_bits(p, bp, 5);
    return L > 1 ? ((uint64_t)1 << (L - 1)) | wsync__cr_bits(p, bp, L - 1) : L;
}

/* A Rice code with k (q + 1 + k <= 56 below the escape), or `esc` one-bits
   and `raw` raw bits (up to 64). */
WSYNC__INLINE uint64_t wsync__cr_rice(const uint8_t *p, uint64_t *bp, unsigned k, unsigned esc, unsigned raw)
{
    uint64_t win = wsync__cr_peek(p, *bp), q = wsync__ctz64(~win | ((uint64_t)1 << 63)), v;
    if (q < esc) {
        *bp += q + 1 + k;
        return (q << k) | ((win >> (q + 1)) & ((((uint64_t)1) << k) - 1));
    }
    *bp += esc;
    if (raw <= 32) return wsync__cr_bits(p, bp, raw);
    v = wsync__cr_bits(p, bp, 32);
    return v | wsync__cr_bits(p, bp, raw - 32) << 32;
}

/* Reads a class-Rice block into s (gap, zv, seg, total) as the range
   coder's reader does; s->r and s->why say whether it is good. */
static void wsync__cr_symbols(wsync__pm_sym *s, const uint8_t *blk, size_t size, uint8_t *padded, uint64_t len,
                              uint64_t room, unsigned w, unsigned k)
{
    const unsigned raw = wsync__cr_raw_bits(w);
    const uint64_t end = 8 * (uint64_t)size;
    uint64_t bp = 0, total = 0;
    unsigned c;
    s->r = WSYNC_OK;
    s->why = NULL;
    memcpy(padded, blk, size);
    memset(padded + size, 0, WSYNC__RCD_PAD);
    for (c = 0; c < k; c++) {
        uint64_t n, ne, j, next = 0, nx, left;
        unsigned kg, ke, km;
        uint32_t *gap = s->gap + total;
        uint64_t *zv = s->zv + total;
        s->seg[c] = total;
        n = wsync__cr_count(padded, &bp);
        if (bp > end) goto truncated;
        if (n > len - total || n > room - total) {
            wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "class change count too large");
            goto out;
        }
        if (!n) continue;
        kg = (unsigned)wsync__cr_bits(padded, &bp, 5);
        if (kg > WSYNC__CR_KMAX) {
            wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "gap parameter above 24");
            goto out;
        }
        for (j = 0; j < n; j++) {
            uint64_t g;
            if (j + 1 < n) {
                /* two gaps from one read where both lie in its 57 sure
                   bits: the second one's bit position no longer waits for
                   a load (checks as one at a time, in the same order) */
                uint64_t win = wsync__cr_peek(padded, bp), top = (uint64_t)1 << 63;
                uint64_t q1 = wsync__ctz64(~win | top), c1 = q1 + 1 + kg, w2 = win >> (c1 & 63);
                uint64_t q2 = wsync__ctz64(~w2 | top), c2 = q2 + 1 + kg, kmask = (((uint64_t)1) << kg) - 1;
                if (q1 < WSYNC__GAP_ESCAPE && q2 < WSYNC__GAP_ESCAPE && c1 + c2 <= 57) {
                    uint64_t g2 = (q2 << kg) | ((w2 >> q2 >> 1) & kmask);
                    g = (q1 << kg) | ((win >> q1 >> 1) & kmask);
                    bp += c1;
                    if (bp > end) goto truncated;
                    if (g >= len - next) goto past_class;
                    next += g + 1;
                    gap[j++] = (uint32_t)g;
                    bp += c2;
                    if (bp > end) goto truncated;
                    if (g2 >= len - next) goto past_class;
                    next += g2 + 1;
                    gap[j] = (uint32_t)g2;
                    continue;
                }
            }
            g = wsync__cr_rice(padded, &bp, kg, WSYNC__GAP_ESCAPE, 32);
            if (bp > end) goto truncated;
            if (g >= len - next) goto past_class;
            next += g + 1;
            gap[j] = (uint32_t)g;
        }
        ne = wsync__cr_count(padded, &bp);
        if (bp > end) goto truncated;
        if (ne > n) {
            wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "more escaped values than changes");
            goto out;
        }
        if (!ne) {
            if (n > end - bp) goto truncated;
            for (j = 0; j < n; j++) zv[j] = wsync__cr_bits(padded, &bp, 1);
            total += n;
            continue;
        }
        ke = (unsigned)wsync__cr_bits(padded, &bp, 5);
        km = (unsigned)wsync__cr_bits(padded, &bp, 5);
        if (ke > WSYNC__CR_KMAX) {
            wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "escape gap parameter above 24");
            goto out;
        }
        nx = wsync__cr_rice(padded, &bp, ke, WSYNC__GAP_ESCAPE, 32);
        if (bp > end) goto truncated;
        if (nx >= n) goto bad_escape;
        for (left = ne, j = 0; j < n; j++) {
            if (j != nx) {
                zv[j] = wsync__cr_bits(padded, &bp, 1);
            } else {
                uint64_t v = wsync__cr_rice(padded, &bp, km, WSYNC__VAL_ESCAPE, raw);
                if (v > UINT64_MAX - 2) {
                    wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "invalid value code");
                    goto out;
                }
                zv[j] = v + 2;
                if (--left) {
                    uint64_t e = wsync__cr_rice(padded, &bp, ke, WSYNC__GAP_ESCAPE, 32);
                    if (e >= n - j - 1) goto bad_escape;
                    nx = j + 1 + e;
                }
            }
            if (bp > end) goto truncated;
        }
        total += n;
    }
    for (c = k; c <= WSYNC__MAX_CLASSES; c++) s->seg[c] = total; /* classes past k are empty */
    if ((bp + 7) / 8 != size)
        wsync__pm_sym_fail(s, WSYNC_ERR_TRAILING_BYTES, "bytes left over after the block's changes");
    else if ((bp & 7) && padded[bp >> 3] >> (bp & 7))
        wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "padding bits after the block's changes are not zero");
    else if (total == 0)
        wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "a stored block without changes");
    goto out;
past_class:
    wsync__pm_sym_fail(s, WSYNC_ERR_OUT_OF_BOUNDS, "rank past its class");
    goto out;
bad_escape:
    wsync__pm_sym_fail(s, WSYNC_ERR_OUT_OF_BOUNDS, "escaped value's index past its class");
    goto out;
truncated:
    wsync__pm_sym_fail(s, WSYNC_ERR_CORRUPT, "stream ends early");
out:
    s->total = total;
}

/* ---- packed-max, both decoders: positions from symbols, scratch ---- */

/* Turns a block's symbols (read by wsync__pm_symbols) into positions and
   values, in position order, appended to the tensor's list at *lat
   (wsync__list_entry; *next: one past the position before). */
static wsync_result wsync__pm_positions(const wsync__pm_sym *sy, const uint8_t *base, unsigned w, wsync_dtype dt,
                                        wsync__cls_rule rule, uint64_t first, uint64_t len, uint8_t *list,
                                        uint64_t *lat, uint64_t *next, uint8_t *cls, uint64_t *hitmap, uint64_t *rb,
                                        uint32_t *pos, wsync__pm_walk_fn walk, const char **why)
{
    wsync__pm_walk s;
    uint64_t nsuper, sc, sc1;
    uint8_t lut[2048];
    unsigned c;
    const char *bad;
    s.zv = sy->zv;
    for (c = 0; c < WSYNC__MAX_CLASSES; c++) {
        s.head[c] = s.vcur[c] = sy->seg[c];
        s.end[c] = sy->seg[c + 1];
    }
    wsync__class_lut(lut, dt, rule);
    s.cls = cls;
    s.bb = base + first * w;
    s.w = w;
    s.first = first;
    s.vmask = w == 8 ? ~(uint64_t)0 : (((uint64_t)1) << (8 * w)) - 1;
    s.out = 0;
    s.list = list;
    s.lat = *lat;
    s.next = *next;
    nsuper = (len + 255) / 256;
    memset(rb, 0, WSYNC__PM_RB_WORDS(len) * sizeof *rb);
    if ((bad = wsync__pm_rank_bits(&s, sy->gap, len, rb)) != NULL) return *why = bad, WSYNC_ERR_OUT_OF_BOUNDS;
    s.rb = rb;
    /* a run of superchunks at a time: class bytes, walk, then the run's
       changes, while its base is in L1 */
    for (sc = 0; sc < nsuper; sc = sc1) {
        sc1 = nsuper - sc < WSYNC__PM_RUN ? nsuper : sc + WSYNC__PM_RUN;
        wsync__class_bytes(cls + 256 * sc, s.bb + 256 * sc * w, dt, rule, lut,
                           (sc1 == nsuper ? len : 256 * sc1) - 256 * sc);
        walk(&s, cls, sc, sc1, hitmap);
        switch (w) {
        case 1: bad = wsync__pm_emit(&s, hitmap, 4 * sc, 4 * sc1, pos, 1); break;
        case 2: bad = wsync__pm_emit(&s, hitmap, 4 * sc, 4 * sc1, pos, 2); break;
        case 4: bad = wsync__pm_emit(&s, hitmap, 4 * sc, 4 * sc1, pos, 4); break;
        default: bad = wsync__pm_emit(&s, hitmap, 4 * sc, 4 * sc1, pos, 8); break;
        }
        if (bad) return *why = bad, WSYNC_ERR_CORRUPT;
    }
    *lat = s.lat;
    *next = s.next;
    if (s.act) return *why = "rank past its class", WSYNC_ERR_OUT_OF_BOUNDS;
    if (s.out != sy->total) return *why = "fewer changes placed than read", WSYNC_ERR_INVALID_ARGUMENT; /* cannot happen */
    return WSYNC_OK;
}


/* The packed-max decoder's scratch for blocks of up to cap elements and
   streams of up to bytes_cap bytes. A worker keeps it from tensor to tensor
   through the decode phase, so that its pages are touched fresh once, not
   once per tensor; it is freed when that phase ends. */
typedef struct wsync__pmx {
    size_t cap, bytes_cap;
    uint8_t *padded, *cls;
    uint32_t *tmp_pos;
    uint64_t *tmp_val, *hitmap, *rb;
    uint32_t *pos; /* a run's positions (wsync__pm_emit) */
    wsync__ctx *ctx;
} wsync__pmx;

static void wsync__pmx_free(wsync__pmx *x, const wsync_allocator *a)
{
    wsync__free(a, x->padded);
    wsync__free(a, x->cls);
    wsync__free(a, x->tmp_pos);
    wsync__free(a, x->tmp_val);
    wsync__free(a, x->hitmap);
    wsync__free(a, x->rb);
    wsync__free(a, x->pos);
    wsync__free(a, x->ctx);
    memset(x, 0, sizeof *x);
}

/* Grows x to hold blocks of cap elements and streams of bytes_cap bytes
   (and the range coder's models where need_ctx); 0 when out of memory,
   with x empty. */
static int wsync__pmx_reserve(wsync__pmx *x, size_t cap, size_t bytes_cap, int need_ctx, const wsync_allocator *a)
{
    if (cap > x->cap) {
        wsync__free(a, x->tmp_pos);
        wsync__free(a, x->tmp_val);
        wsync__free(a, x->cls);
        wsync__free(a, x->hitmap);
        wsync__free(a, x->rb);
        x->tmp_pos = (uint32_t *)wsync__alloc(a, cap * sizeof *x->tmp_pos);
        x->tmp_val = (uint64_t *)wsync__alloc(a, cap * sizeof *x->tmp_val);
        x->cls = (uint8_t *)wsync__alloc(a, (cap + 255) & ~(size_t)255);
        x->hitmap = (uint64_t *)wsync__alloc(a, (cap + 255) / 256 * 4 * sizeof *x->hitmap);
        x->rb = (uint64_t *)wsync__alloc(a, WSYNC__PM_RB_WORDS(cap) * sizeof *x->rb);
        x->cap = cap;
        if (!x->tmp_pos || !x->tmp_val || !x->cls || !x->hitmap || !x->rb) return wsync__pmx_free(x, a), 0;
    }
    if (bytes_cap > x->bytes_cap || !x->padded) {
        wsync__free(a, x->padded);
        x->padded = (uint8_t *)wsync__alloc(a, bytes_cap + WSYNC__RCD_PAD);
        x->bytes_cap = bytes_cap;
        if (!x->padded) return wsync__pmx_free(x, a), 0;
    }
    if (!x->pos) { /* one run's positions, whatever the block's size */
        x->pos = (uint32_t *)wsync__alloc(a, (256 * WSYNC__PM_RUN + 4) * sizeof *x->pos);
        if (!x->pos) return wsync__pmx_free(x, a), 0;
    }
    if (need_ctx && !x->ctx) {
        x->ctx = (wsync__ctx *)wsync__alloc(a, sizeof *x->ctx);
        if (!x->ctx) return wsync__pmx_free(x, a), 0;
    }
    return 1;
}

/* ==== packed and packed-max: the stream, written and read ==== */

#ifndef WSYNC_NO_ENCODE
/* ---- the stream, written: diff, blocks, header, a tensor's stream >>stream-enc ---- */

/* The largest finite exponent of a tensor: packed-max's class 0. One loop
   per dtype, branch-free, so the compiler can vectorise it. */
#define WSYNC__TOP_LOOP(T, SHIFT, MASK)                                   \
    for (k = 0; k < nelem; k++) {                                         \
        T u_;                                                             \
        unsigned e_;                                                      \
        memcpy(&u_, bp + k * sizeof(T), sizeof(T));                       \
        e_ = (unsigned)(u_ >> (SHIFT)) & (MASK);                          \
        e_ = e_ == (MASK) ? 0 : e_; /* infinities and NaNs */             \
        top = e_ > top ? e_ : top;                                        \
    }

static unsigned wsync__top_exponent(const wsync_tensor *b, unsigned w, uint64_t nelem)
{
    const uint8_t *bp = (const uint8_t *)b->data;
    unsigned top = 0;
    uint64_t k;
    (void)w;
    switch (b->dtype) {
    case WSYNC_DTYPE_BF16:
#if WSYNC__X86
        { /* SSE2, 16 elements a step (gcc -O2 does not vectorise the loop) */
            const __m128i emask = _mm_set1_epi16(0xFF);
            __m128i m = _mm_setzero_si128();
            uint16_t lanes[8];
            unsigned j;
            for (k = 0; k + 16 <= nelem; k += 16) {
                __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(bp + 2 * k));
                __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(bp + 2 * k + 16));
                __m128i ea = _mm_and_si128(_mm_srli_epi16(a, 7), emask), ec = _mm_and_si128(_mm_srli_epi16(c, 7), emask);
                ea = _mm_andnot_si128(_mm_cmpeq_epi16(ea, emask), ea); /* infinities and NaNs */
                ec = _mm_andnot_si128(_mm_cmpeq_epi16(ec, emask), ec);
                m = _mm_max_epi16(m, _mm_max_epi16(ea, ec));
            }
            _mm_storeu_si128((__m128i *)(void *)lanes, m);
            for (j = 0; j < 8; j++) top = lanes[j] > top ? lanes[j] : top;
            bp += 2 * k;
            nelem -= k;
        }
#endif
        WSYNC__TOP_LOOP(uint16_t, 7, 0xFFu)
        break;
    case WSYNC_DTYPE_F16: WSYNC__TOP_LOOP(uint16_t, 10, 0x1Fu) break;
    case WSYNC_DTYPE_F32: WSYNC__TOP_LOOP(uint32_t, 23, 0xFFu) break;
    case WSYNC_DTYPE_F64: WSYNC__TOP_LOOP(uint64_t, 52, 0x7FFu) break;
    case WSYNC_DTYPE_F8_E4M3: WSYNC__TOP_LOOP(uint8_t, 3, 0xFu) break;
    case WSYNC_DTYPE_F8_E5M2: WSYNC__TOP_LOOP(uint8_t, 2, 0x1Fu) break;
    default: break;
    }
    return top;
}
#undef WSYNC__TOP_LOOP

WSYNC__INLINE void wsync__scatter_w(uint8_t *base, const uint8_t *next, const uint32_t *pos, size_t count,
                                    const unsigned w)
{
    size_t k;
    for (k = 0; k < count; k++) memcpy(base + (size_t)pos[k] * w, next + (size_t)pos[k] * w, w);
}

/* Copies the changed elements of next into base (WSYNC_DELTA_UPDATE_BASE). */
static void wsync__scatter(uint8_t *base, const uint8_t *next, unsigned w, const uint32_t *pos, size_t count)
{
    WSYNC__BY_WIDTH(w, wsync__scatter_w, base, next, pos, count);
}

/* The block's positions into pos; with dx, the block's bytes of x are added
   to that digest too, on the diff's own loads where the AVX2 path for 2-byte
   elements applies (the state must be at a 1 KiB boundary). */
static size_t wsync__diff_block(const uint8_t *bb, const uint8_t *xb, size_t len, unsigned w, uint32_t *pos,
                                wsync_digest_state *dx)
{
    size_t c;
#if WSYNC__X86
    if (dx && w == 2 && dx->nbuf == 0 && wsync__diff_digest_fused()) {
        size_t rounds = len * 2 / 1024, done = rounds * 1024, k, rest;
        c = wsync__diff_digest_w2_avx2(bb, xb, rounds, pos, dx->acc);
        dx->len += done;
        if (done < len * 2) {
            rest = wsync_diff(bb + done, xb + done, len - done / 2, 2, pos + c);
            for (k = 0; k < rest; k++) pos[c + k] += (uint32_t)(done / 2);
            c += rest;
            wsync_digest_update(dx, xb + done, len * 2 - done);
        }
        return c;
    }
#endif
    c = wsync_diff(bb, xb, len, w, pos);
    if (dx) wsync_digest_update(dx, xb, len * w);
    return c;
}

/* Appends block bi's payload to out (nothing for a block without changes)
   and returns its size and change count through *size and *count. */
static wsync_result wsync__encode_block(wsync__buf *out, const wsync_tensor *b, const wsync_tensor *x, unsigned w,
                                        uint64_t nelem, uint64_t blk, uint64_t bi, int coder, unsigned emax,
                                        int update, wsync__encblk *s, wsync_digest_state *dx, uint32_t *size,
                                        uint64_t *count, wsync_error *err)
{
    uint64_t first = bi * blk, len = nelem - first < blk ? nelem - first : blk;
    const uint8_t *bb = (const uint8_t *)b->data + first * w, *xb = (const uint8_t *)x->data + first * w;
    size_t before = out->len, c = wsync__diff_block(bb, xb, (size_t)len, w, s->pos, dx);
    wsync__cls_rule rule = wsync__cls_rule_for(coder, emax);
    if (c && !(coder == WSYNC__CODER_ARITH   ? wsync__arith_block(out, bb, xb, w, b->dtype, rule, len, s->pos, c, s)
               : coder == WSYNC__CODER_CRICE ? wsync__crice_block(out, bb, xb, w, b->dtype, rule, len, s->pos, c, s)
                                             : wsync__rice_block(out, bb, xb, w, s->pos, c, WSYNC_IMPL_AUTO)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, b->name, strlen(b->name), "%s",
                           "delta stream buffer");
    if (out->len - before > UINT32_MAX)
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, b->name, strlen(b->name), "%s", "block too large");
    if (update && c) wsync__scatter((uint8_t *)b->data + first * w, xb, w, s->pos, c);
    *size = (uint32_t)(out->len - before);
    *count = c;
    return WSYNC_OK;
}

/* A stream's fixed header (the block table follows it). */
static size_t wsync__stream_header(uint8_t *p, const wsync_tensor *b, unsigned block_log2, int coder, unsigned emax,
                                   uint64_t changed, uint64_t base_digest, uint64_t result_digest)
{
    size_t i, fixed = 8 + 8 * (size_t)b->rank + 24 + (WSYNC__CODER_HAS_CLASSES(coder) ? 8 : 0);
    memcpy(p, WSYNC__STREAM_MAGIC, 4);
    p[4] = (uint8_t)coder;
    p[5] = (uint8_t)b->dtype;
    p[6] = (uint8_t)b->rank;
    p[7] = (uint8_t)block_log2;
    for (i = 0; i < b->rank; i++) wsync__store_le64(p + 8 + 8 * i, b->shape[i]);
    wsync__store_le64(p + 8 + 8 * b->rank, changed);
    wsync__store_le64(p + 16 + 8 * b->rank, base_digest);
    wsync__store_le64(p + 24 + 8 * b->rank, result_digest);
    if (WSYNC__CODER_HAS_CLASSES(coder)) {
        uint8_t *q = p + 32 + 8 * b->rank;
        wsync__cls_rule r = wsync__cls_rule_for(coder, emax);
        memset(q, 0, 8);
        q[0] = (uint8_t)r.top;
        q[1] = (uint8_t)(r.top >> 8);
        q[2] = (uint8_t)r.k;
        q[3] = (uint8_t)r.shift;
    }
    return fixed;
}

/* One tensor as a packed stream on one thread: the digests are taken block
   by block while each block is still in cache. */
static wsync_result wsync__packed_tensor(const wsync_tensor *b, const wsync_tensor *x, unsigned w,
                                         uint64_t nelem, unsigned block_log2, int coder, int update,
                                         const uint64_t *base_digest, uint64_t *result_digest,
                                         wsync__buf *out, uint64_t *changed_out, wsync__encblk *s,
                                         wsync_error *err)
{
    uint64_t blk = (uint64_t)1 << block_log2, nblocks = (nelem + blk - 1) / blk, bi, changed = 0, bd;
    size_t hdr_at = out->len, table_at, fixed;
    wsync_digest_state db, dx;
    unsigned top = WSYNC__CODER_HAS_CLASSES(coder) ? wsync__top_exponent(b, w, nelem) : 0;
    wsync_result r;
    fixed = 8 + 8 * (size_t)b->rank + 24 + (WSYNC__CODER_HAS_CLASSES(coder) ? 8 : 0);
    if (nblocks > UINT32_MAX || !wsync__buf_reserve(out, fixed + 4 * (size_t)nblocks))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, b->name, strlen(b->name), "%s",
                           "delta stream buffer");
    out->len += fixed;
    table_at = out->len;
    out->len += 4 * (size_t)nblocks;
    wsync_digest_init(&db);
    wsync_digest_init(&dx);
    for (bi = 0; bi < nblocks; bi++) {
        uint64_t first = bi * blk, len = nelem - first < blk ? nelem - first : blk, c = 0;
        uint32_t size = 0;
        /* digest while the block is still in cache (the base's before an update) */
        if (!base_digest) wsync_digest_update(&db, (const uint8_t *)b->data + first * w, (size_t)(len * w));
        if ((r = wsync__encode_block(out, b, x, w, nelem, blk, bi, coder, top, update, s, &dx, &size, &c, err)) !=
            WSYNC_OK)
            return r;
        wsync__put_le32(out->p + table_at + 4 * bi, size);
        changed += c;
    }
    *result_digest = wsync_digest_final(&dx);
    bd = base_digest ? *base_digest : wsync_digest_final(&db);
    wsync__stream_header(out->p + hdr_at, b, block_log2, coder, top, changed, bd, *result_digest);
    if (changed == 0) out->len = table_at; /* an unchanged tensor needs no block table */
    *changed_out = changed;
    return WSYNC_OK;
}

#endif /* WSYNC_NO_ENCODE */

/* ---- the stream, read: its header and block table, its blocks >>stream-dec ---- */

static wsync_result wsync__packed_patch(wsync__patch *pt, const wsync_st_tensor *t, wsync_tensor **sorted,
                                        size_t n_targets, const wsync_allocator *a, int check_base,
                                        int defer_check, wsync__pmx *x, wsync_error *err)
{
    const uint8_t *p = t->data;
    uint64_t size = t->end - t->begin, fixed, blk, nblocks, bi, total = 0, changed, off;
    unsigned rank, block_log2, i, w, coder;
    wsync__cls_rule rule = {0, 1, 0};
    size_t padded_cap = 0;
    wsync__pm_walk_fn walk = NULL;
    uint64_t at = t->key_offset, lat = 0, lnext = 0;
    wsync_result r;
    if (t->dtype != WSYNC_DTYPE_U8 || t->rank != 1)
        return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, at, t->name, t->name_len, "%s",
                           "a packed delta entry must be a 1-D U8 tensor");
    if (size < 8 || memcmp(p, WSYNC__STREAM_MAGIC, 4) != 0)
        return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, at, t->name, t->name_len, "%s",
                           "stream does not start with WSD1");
    if (p[4] != WSYNC__CODER_RICE && !WSYNC__CODER_HAS_CLASSES(p[4]))
        return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, at, t->name, t->name_len, "coder %u", (unsigned)p[4]);
    coder = p[4];
    rank = p[6];
    block_log2 = p[7];
    fixed = 8 + 8 * (uint64_t)rank + 24 + (WSYNC__CODER_HAS_CLASSES(coder) ? 8 : 0);
    if (size < fixed)
        return wsync__fail(err, WSYNC_ERR_CORRUPT, at, t->name, t->name_len, "%s", "stream header truncated");
    if ((r = wsync__match(sorted, n_targets, t->name, t->name_len, at, &pt->target, &w, &pt->nelem, err)) != WSYNC_OK)
        return r;
    {
        int same = p[5] == (uint8_t)pt->target->dtype && rank == pt->target->rank;
        for (i = 0; same && i < rank; i++) same = wsync__load_le64(p + 8 + 8 * i) == pt->target->shape[i];
        if (!same) {
            char want[128], have[128];
            wsync__shape_str(want, sizeof want, (wsync_dtype)p[5], rank, NULL, p + 8);
            wsync__shape_str(have, sizeof have, pt->target->dtype, pt->target->rank, pt->target->shape, NULL);
            return wsync__fail(err, WSYNC_ERR_LAYOUT, at, t->name, t->name_len,
                               "the chain has %s, the target is %s (the model does not match the chain)", want, have);
        }
    }
    if (block_log2 < 6 || block_log2 > WSYNC_DELTA_MAX_BLOCK_LOG2)
        return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, at, t->name, t->name_len,
                           "block_log2 %u outside 6..%u (the decoders' scratch is a block per thread)", block_log2,
                           WSYNC_DELTA_MAX_BLOCK_LOG2);
    if (WSYNC__CODER_HAS_CLASSES(coder)) {
        const uint8_t *q = p + 8 + 8 * rank + 24;
        rule.top = (unsigned)q[0] | (unsigned)q[1] << 8;
        rule.k = q[2];
        rule.shift = q[3];
        /* the range coder has one rule; class-Rice says its own */
        if ((coder == WSYNC__CODER_ARITH ? rule.k != WSYNC__MAX_CLASSES || rule.shift
                                         : rule.k < 1 || rule.k > WSYNC__MAX_CLASSES || rule.shift > 3) ||
            q[4] || q[5] || q[6] || q[7] || rule.top > wsync__exp_max(pt->target->dtype))
            return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, at, t->name, t->name_len, "%s",
                               "bad packed-max parameters");
    }
    changed = wsync__load_le64(p + 8 + 8 * rank);
    pt->base_digest = wsync__load_le64(p + 16 + 8 * rank);
    pt->result_digest = wsync__load_le64(p + 24 + 8 * rank);
    pt->has_digests = 1;
    pt->w = w;
    pt->src = t;
    if (changed == 0) {
        if (size != fixed)
            return wsync__fail(err, WSYNC_ERR_TRAILING_BYTES, at, t->name, t->name_len, "%s",
                               "an unchanged tensor's stream has extra bytes");
        pt->count = 0;
        return WSYNC_OK;
    }
    if (pt->nelem > UINT32_MAX)
        return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, at, t->name, t->name_len, "%s",
                           "applying packed deltas to tensors of 2^32 or more elements");
    blk = (uint64_t)1 << block_log2;
    nblocks = (pt->nelem + blk - 1) / blk;
    /* A change costs at least 2 bits in a Rice or class-Rice stream, and at
       least seven range-coded decisions of >= 0.022 bits each (probabilities
       stop at 2017/2048) in a range-coded one: a hostile count cannot make
       us allocate more than 4 (or 64) entries per byte of stream. */
    if (changed > pt->nelem || changed / (coder == WSYNC__CODER_ARITH ? 64 : 4) > size)
        return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, at, t->name, t->name_len,
                           "%llu changes cannot fit this stream", (unsigned long long)changed);
    if (nblocks > (size - fixed) / 4)
        return wsync__fail(err, WSYNC_ERR_CORRUPT, at, t->name, t->name_len, "%s", "block table truncated");
    off = fixed + 4 * nblocks;
    for (bi = 0; bi < nblocks; bi++) total += wsync__get_le32(p + fixed + 4 * bi);
    if (total != size - off)
        return wsync__fail(err, total > size - off ? WSYNC_ERR_CORRUPT : WSYNC_ERR_TRAILING_BYTES, at, t->name,
                           t->name_len, "block sizes add up to %llu, the stream holds %llu",
                           (unsigned long long)total, (unsigned long long)(size - off));
    if (coder == WSYNC__CODER_RICE) {
        /* check the structure now; decode again where the changes are used */
        pt->rice = 1;
        pt->stream = p;
        pt->table_at = fixed;
        pt->data_at = off;
        pt->nblocks = nblocks;
        pt->blk = blk;
        if (defer_check) { /* the digest pass decodes and checks every block */
            pt->count = changed;
            return WSYNC_OK;
        }
        pt->count = 0;
        {
            uint64_t bad = 0, bad_off = 0;
            const char *why = "";
            r = wsync__rice_check_blocks(p, fixed, off, 0, nblocks, blk, pt->nelem, w, changed, 1, &pt->count, &bad,
                                         &bad_off, &why);
            if (r != WSYNC_OK)
                return wsync__fail(err, r, at, t->name, t->name_len, "block %llu (stream byte %llu): %s",
                                   (unsigned long long)bad, (unsigned long long)bad_off, why);
        }
        if (pt->count != changed)
            return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, at, t->name, t->name_len,
                               "blocks hold %llu changes, the header says %llu", (unsigned long long)pt->count,
                               (unsigned long long)changed);
        return WSYNC_OK;
    }
    if (wsync__list_bound(changed, pt->nelem, w) <= (uint64_t)SIZE_MAX)
        pt->list = (uint8_t *)wsync__alloc(a, (size_t)wsync__list_bound(changed, pt->nelem, w));
    if (!pt->list)
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, at, t->name, t->name_len, "%s", "decoded changes");
    {
        size_t cap = (size_t)(blk < pt->nelem ? blk : pt->nelem);
        for (bi = 0; bi < nblocks; bi++) {
            uint32_t bsize = wsync__get_le32(p + fixed + 4 * bi);
            if (bsize > padded_cap) padded_cap = bsize;
        }
        walk = wsync__pm_walk_pick(WSYNC_IMPL_AUTO);
        /* the range coder's models only for coder 2 */
        if (!wsync__pmx_reserve(x, cap, padded_cap, coder == WSYNC__CODER_ARITH, a))
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, at, t->name, t->name_len, "%s", "decoder scratch");
    }
    pt->count = 0;
    r = WSYNC_OK;
    for (bi = 0; bi < nblocks; bi++) {
        uint32_t bsize = wsync__get_le32(p + fixed + 4 * bi);
        uint64_t first = bi * blk, len = pt->nelem - first < blk ? pt->nelem - first : blk;
        uint64_t seg[WSYNC__MAX_CLASSES + 1];
        wsync__pm_sym sy;
        const char *why;
        if (!bsize) continue;
        sy.ctx = x->ctx;
        sy.gap = x->tmp_pos;
        sy.zv = x->tmp_val;
        sy.seg = seg;
        if (coder == WSYNC__CODER_CRICE) {
            wsync__cr_symbols(&sy, p + off, bsize, x->padded, len, changed - pt->count, w, rule.k);
        } else {
            wsync__pm_sym_begin(&sy, p + off, bsize, x->padded, len, changed - pt->count);
            wsync__pm_symbols(&sy);
        }
        r = sy.r;
        why = sy.why;
        if (r == WSYNC_OK)
            r = wsync__pm_positions(&sy, (const uint8_t *)pt->target->data, w, pt->target->dtype, rule, first, len,
                                    pt->list, &lat, &lnext, x->cls, x->hitmap, x->rb, x->pos, walk, &why);
        if (r != WSYNC_OK && check_base &&
            wsync_digest(pt->target->data, (size_t)pt->target->nbytes) != pt->base_digest) {
            return wsync__fail(err, WSYNC_ERR_DIGEST_MISMATCH, at, t->name, t->name_len, "%s",
                               "the target is not this delta's base (its digest differs)");
        }
        if (r != WSYNC_OK)
            return wsync__fail(err, r, at, t->name, t->name_len, "block %llu (stream byte %llu): %s",
                               (unsigned long long)bi, (unsigned long long)off, why);
        pt->count += sy.total;
        off += bsize;
    }
    if (pt->count != changed)
        r = wsync__fail(err, WSYNC_ERR_INVALID_HEADER, at, t->name, t->name_len,
                        "blocks hold %llu changes, the header says %llu", (unsigned long long)pt->count,
                        (unsigned long long)changed);
    return r;
}

/* ==== trl-v1 and trl-v3 (TRL's delta weight sync) ==== */

#ifndef WSYNC_NO_ENCODE
/* ---- trl-v1 and trl-v3: the encoder's pieces >>trl-enc ---- */

/* All positions where b and x differ, for the trl encodings. */
static wsync_result wsync__all_positions(const wsync_tensor *b, const wsync_tensor *x, unsigned w,
                                         uint64_t nelem, wsync__buf *pos, uint32_t *scratch,
                                         size_t scratch_cap, size_t *count, wsync_error *err)
{
    uint64_t first;
    size_t total = 0, i;
    pos->len = 0;
    for (first = 0; first < nelem; first += scratch_cap) {
        size_t len = nelem - first < scratch_cap ? (size_t)(nelem - first) : scratch_cap;
        size_t c = wsync_diff((const uint8_t *)b->data + first * w, (const uint8_t *)x->data + first * w,
                              len, w, scratch);
        if (!wsync__buf_reserve(pos, c * 4))
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, b->name, strlen(b->name), "%s",
                               "positions");
        for (i = 0; i < c; i++) {
            uint32_t p = (uint32_t)(first + scratch[i]);
            memcpy(pos->p + pos->len + 4 * i, &p, 4);
        }
        pos->len += c * 4;
        total += c;
    }
    *count = total;
    return WSYNC_OK;
}

/* trl encode: the new values at the n positions in pos (uint32 in host
   order), in order, into vals; and into the base too where upd is given
   (WSYNC_DELTA_UPDATE_BASE). w is a constant where this is inlined. */
WSYNC__INLINE void wsync__trl_gather(uint8_t *vals, const uint8_t *src, const uint8_t *pos, uint64_t n, uint8_t *upd,
                                     const unsigned w)
{
    uint64_t k;
    for (k = 0; k < n; k++) {
        uint32_t p;
        memcpy(&p, pos + 4 * k, 4);
        memcpy(vals + k * w, src + (size_t)p * w, w);
        if (upd) memcpy(upd + (size_t)p * w, src + (size_t)p * w, w);
    }
}

#endif /* WSYNC_NO_ENCODE */

/* ---- trl-v1 and trl-v3: the reader and its write loop >>trl-dec ---- */

/* Entry k of a trl indices tensor of iw-byte entries, as the file holds
   them (little-endian), unsigned: the write reads I32 and I64 indices this
   way once the check found every one of them non-negative. */
WSYNC__INLINE uint64_t wsync__trl_index(const uint8_t *ix, uint64_t k, unsigned iw)
{
    const uint8_t *p = ix + k * iw;
    return iw == 2 ? (uint64_t)p[0] | (uint64_t)p[1] << 8 : iw == 4 ? wsync__get_le32(p) : wsync__load_le64(p);
}

/* A trl index or gap for the check: wsync__trl_index's reading, with a
   negative I32 or I64 index as UINT64_MAX. */
static uint64_t wsync__uint_at(const uint8_t *p, wsync_dtype t)
{
    switch (t) {
    case WSYNC_DTYPE_U16: return wsync__trl_index(p, 0, 2);
    case WSYNC_DTYPE_U32: return wsync__trl_index(p, 0, 4);
    case WSYNC_DTYPE_I32: { uint64_t v = wsync__trl_index(p, 0, 4); return v >> 31 ? UINT64_MAX : v; }
    case WSYNC_DTYPE_I64: { uint64_t v = wsync__trl_index(p, 0, 8); return v >> 63 ? UINT64_MAX : v; }
    default: return wsync__trl_index(p, 0, 8);
    }
}

/* Compares name[0..n) with the concatenation a[0..an) b[0..bn). */
static int wsync__cmp_concat(const char *name, size_t n, const char *a, size_t an, const char *b, size_t bn)
{
    size_t k = n < an ? n : an;
    int c = memcmp(name, a, k);
    if (c) return c;
    if (n < an) return -1;
    c = wsync__cmp_names(name + an, n - an, b, bn);
    return c;
}

/* The tensor named prefix + suffix, without building the name. */
static const wsync_st_tensor *wsync__find_suffixed(const wsync_st_file *f, const char *prefix, size_t plen,
                                                   const char *suffix)
{
    size_t lo = 0, hi = f->n_tensors, slen = strlen(suffix);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const wsync_st_tensor *t = f->by_name[mid];
        int c = wsync__cmp_concat(t->name, t->name_len, prefix, plen, suffix, slen);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Whether every position of a trl-v3 gap tensor (U16 or U32 gaps) is in
   range, without a branch per entry; the loop after it finds a bad one and
   says why. Summing gaps is a serial chain that a branch per entry would
   lengthen; trl-v1's indices need no sum, so their check keeps its plain
   loop. */
static int wsync__trl3_check_fast(const uint8_t *ix, uint64_t n, wsync_dtype dt, uint64_t nelem)
{
    uint64_t k, bad = 0, cur = 0;
    unsigned iw = dt == WSYNC_DTYPE_U16 ? 2 : 4;
    for (k = 0; k < n; k++) {
        /* a gap is below 2^32, so the sum cannot wrap before it passes
           nelem, and bad stays set from then on */
        cur = (k ? cur + 1 : 0) + wsync__trl_index(ix, k, iw);
        bad |= (uint64_t)(cur >= nelem);
    }
    return !bad;
}

/* A trl entry: indices (or gaps) plus values; checked in full, read twice
   (here and when writing) straight from the file. */
static wsync_result wsync__trl_patch(wsync__patch *pt, const wsync_st_file *f, const wsync_st_tensor *ix,
                                     int v3, wsync_tensor **sorted, size_t n_targets, wsync_error *err)
{
    size_t sfx = v3 ? 4 : 8, base_len = ix->name_len - sfx, iw;
    const wsync_st_tensor *vs;
    uint64_t k, prev = 0, cur = 0, at = ix->key_offset;
    unsigned w;
    wsync_result r;
    vs = wsync__find_suffixed(f, ix->name, base_len, v3 ? ".val" : ".values");
    if (!vs)
        return wsync__fail(err, WSYNC_ERR_NOT_FOUND, at, ix->name, ix->name_len, "no matching %s tensor",
                           v3 ? ".val" : ".values");
    if ((r = wsync__match(sorted, n_targets, ix->name, base_len, at, &pt->target, &w, &pt->nelem, err)) != WSYNC_OK)
        return r;
    if (v3 ? (ix->dtype != WSYNC_DTYPE_U16 && ix->dtype != WSYNC_DTYPE_U32)
           : (ix->dtype != WSYNC_DTYPE_I32 && ix->dtype != WSYNC_DTYPE_I64))
        return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, at, ix->name, ix->name_len, "index dtype %s",
                           wsync_dtype_name(ix->dtype));
    if (vs->dtype != pt->target->dtype)
        return wsync__fail(err, WSYNC_ERR_LAYOUT, at, ix->name, ix->name_len,
                           "the chain's values are %s, the target is %s (the model does not match the chain)",
                           wsync_dtype_name(vs->dtype), wsync_dtype_name(pt->target->dtype));
    if (ix->rank != 1 || vs->rank != 1 || ix->nelem != vs->nelem)
        return wsync__fail(err, WSYNC_ERR_SIZE_MISMATCH, at, ix->name, ix->name_len,
                           "%llu indices for %llu values (both must be 1-D)", (unsigned long long)ix->nelem,
                           (unsigned long long)vs->nelem);
    iw = wsync_dtype_bits(ix->dtype) / 8;
    /* trl-v3 all good: nothing left to check; else find the bad one */
    k = v3 && wsync__trl3_check_fast(ix->data, ix->nelem, ix->dtype, pt->nelem) ? ix->nelem : 0;
    for (; k < ix->nelem; k++) {
        uint64_t v = wsync__uint_at(ix->data + k * iw, ix->dtype);
        if (v3) {
            if (!wsync_add_u64(prev, v, &cur) || cur >= pt->nelem)
                return wsync__fail(err, WSYNC_ERR_OUT_OF_BOUNDS, at, ix->name, ix->name_len,
                                   "entry %llu points past the tensor's %llu elements", (unsigned long long)k,
                                   (unsigned long long)pt->nelem);
            prev = cur + 1;
        } else {
            if (v >= pt->nelem)
                return wsync__fail(err, WSYNC_ERR_OUT_OF_BOUNDS, at, ix->name, ix->name_len,
                                   "index %lld at entry %llu is outside 0..%llu",
                                   v == UINT64_MAX ? -1LL : (long long)v, (unsigned long long)k,
                                   (unsigned long long)(pt->nelem - 1));
            if (k && v <= cur)
                return wsync__fail(err, WSYNC_ERR_INVALID_OFFSETS, at, ix->name, ix->name_len,
                                   "indices not strictly ascending at entry %llu", (unsigned long long)k);
            cur = v;
        }
    }
    pt->src = ix;
    pt->vals = vs;
    pt->w = w;
    pt->count = ix->nelem;
    return WSYNC_OK;
}

/* Writes the n changes of a checked trl patch: positions (trl-v1) or gaps
   (trl-v3) of iw bytes, and values of w bytes (a constant where inlined;
   iw and v3 are the same for the whole loop, so their tests predict),
   each target prefetched 64 changes ahead. */
WSYNC__INLINE void wsync__trl_write_w(const uint8_t *ix, unsigned iw, int v3, const uint8_t *vals, uint64_t n,
                                      uint8_t *data, const unsigned w)
{
    uint64_t k, cur = 0, ahead = 0; /* trl-v3: ahead is the position of entry k + 63 */
    for (k = 0; k < n && k < 64; k++) {
        uint64_t q = wsync__trl_index(ix, k, iw);
        ahead = v3 && k ? ahead + 1 + q : q;
        WSYNC__PREFETCH(data + (size_t)ahead * w);
    }
    for (k = 0; k < n; k++) {
        uint64_t q = wsync__trl_index(ix, k, iw);
        if (k + 64 < n) {
            uint64_t qa = wsync__trl_index(ix, k + 64, iw);
            ahead = v3 ? ahead + 1 + qa : qa;
            WSYNC__PREFETCH(data + (size_t)ahead * w);
        }
        cur = v3 && k ? cur + 1 + q : q;
        memcpy(data + (size_t)cur * w, vals + (size_t)k * w, w);
    }
}

#ifndef WSYNC_NO_ENCODE
/* ---- encoding: wsync_delta_encode, __metadata__ >>delta-encode ---- */

typedef struct wsync__out_tensor {
    char *name;       /* owned when the encoding adds a suffix */
    wsync_dtype dtype;
    uint64_t shape;
    wsync__buf data;
} wsync__out_tensor;

static void wsync__fmt_u64(char *buf, size_t cap, uint64_t v)
{
    snprintf(buf, cap, "%llu", (unsigned long long)v);
}

/* Checks a base/next pair and returns its element width. */
static wsync_result wsync__check_pair(const wsync_tensor *b, const wsync_tensor *x, unsigned *width,
                                      uint64_t *nelem, wsync_error *err)
{
    uint64_t n = 1, nb = 0;
    uint32_t d;
    unsigned bits;
    const char *name = b->name ? b->name : "";
    if (!b->name || !x->name || strcmp(b->name, x->name) != 0)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, name, strlen(name), "%s",
                           "base and next tensors are not paired by name");
    if (b->dtype != x->dtype || b->rank != x->rank)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, name, strlen(name),
                           "dtype or rank differ (%s/%u vs %s/%u)", wsync_dtype_name(b->dtype),
                           (unsigned)b->rank, wsync_dtype_name(x->dtype), (unsigned)x->rank);
    for (d = 0; d < b->rank; d++) {
        if (b->shape[d] != x->shape[d])
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, name, strlen(name),
                               "shapes differ in dimension %u", (unsigned)d);
        if (!wsync_mul_u64(n, b->shape[d], &n))
            return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, name, strlen(name), "%s",
                               "shape product overflows");
    }
    bits = wsync_dtype_bits(b->dtype);
    if (bits != 8 && bits != 16 && bits != 32 && bits != 64)
        return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, name, strlen(name),
                           "deltas need 1, 2, 4 or 8-byte elements, not %s", wsync_dtype_name(b->dtype));
    if (wsync_dtype_nbytes(b->dtype, n, &nb) != WSYNC_OK || nb != b->nbytes || nb != x->nbytes ||
        (nb && (!b->data || !x->data)))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, name, strlen(name),
                           "nbytes or data do not match the shape (%llu bytes expected)",
                           (unsigned long long)nb);
    if (nb > (uint64_t)SIZE_MAX)
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, name, strlen(name), "%s", "tensor too large");
    *width = bits / 8;
    *nelem = n;
    return WSYNC_OK;
}

typedef struct wsync__enc {
    const wsync_tensor *base, *next;
    const wsync_delta_options *o;
    wsync_encoding enc;
    int packed;
    int coder;                    /* packed*: the stream coder (WSYNC__CODER_*) */
    unsigned block_log2;
    unsigned *width;
    uint64_t *nelem, *changed;
    wsync__out_tensor *outs;      /* packed: one per tensor; trl: two per tensor */
    wsync__encblk *scratch;       /* one per worker */
    wsync__buf *posbuf;           /* one per worker */
    /* packed on several threads: tensors are cut into runs of blocks */
    struct wsync__eitem *items;
    size_t n_items;
    size_t *item_first;           /* per tensor: its first item */
    unsigned *top;                /* per tensor: packed-max's top exponent */
    uint32_t **sizes;             /* per tensor: block sizes */
} wsync__enc;

typedef struct wsync__eitem {
    size_t tensor;
    uint64_t b0, b1;
    wsync__buf buf;
    uint64_t changed;
} wsync__eitem;

#define WSYNC__ENC_ITEM_BLOCKS 16

static void wsync__encblk_free(wsync__encblk *s, const wsync_allocator *a)
{
    wsync__free(a, s->pos);
    wsync__free(a, s->cls);
    wsync__free(a, s->rank);
    wsync__free(a, s->zv);
    wsync__free(a, s->ctx);
    wsync__free(a, s->by_class);
    memset(s, 0, sizeof *s);
}

/* Scratch for coder `coder`: positions; and for packed-max's coders the
   class bytes and grouping, with the range coder's models (coder 2) or the
   zigzag steps (coder 3). */
static int wsync__encblk_init(wsync__encblk *s, size_t cap, int coder, const wsync_allocator *a)
{
    memset(s, 0, sizeof *s);
    s->cap = cap;
    s->pos = (uint32_t *)wsync__alloc(a, cap * sizeof *s->pos);
    if (!s->pos) return 0;
    if (!WSYNC__CODER_HAS_CLASSES(coder)) return 1;
    if (coder == WSYNC__CODER_ARITH && !(s->ctx = (wsync__ctx *)wsync__alloc(a, sizeof *s->ctx))) return 0;
    if (coder == WSYNC__CODER_CRICE && !(s->zv = (uint64_t *)wsync__alloc(a, cap * sizeof *s->zv))) return 0;
    s->by_class = (uint32_t *)wsync__alloc(a, cap * sizeof *s->by_class);
    s->cls = (uint8_t *)wsync__alloc(a, (cap + 255) & ~(size_t)255); /* padded to whole superchunks */
    s->rank = (uint32_t *)wsync__alloc(a, cap * sizeof *s->rank);
    return s->by_class && s->cls && s->rank;
}

static wsync_result wsync__encode_one(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__enc *E = (wsync__enc *)user;
    const wsync_tensor *b = &E->base[i], *x = &E->next[i];
    const wsync_allocator *a = &E->o->allocator;
    wsync__encblk *s = &E->scratch[worker];
    unsigned w = E->width[i];
    uint64_t nelem = E->nelem[i], rd = 0;
    wsync_result r;
    if (E->packed) {
        wsync__out_tensor *ot = &E->outs[i];
        ot->name = (char *)b->name; /* not owned */
        ot->dtype = WSYNC_DTYPE_U8;
        ot->data.a = a;
        r = wsync__packed_tensor(b, x, w, nelem, E->block_log2, E->coder,
                                 (E->o->flags & WSYNC_DELTA_UPDATE_BASE) != 0, E->o->base_digests ? &E->o->base_digests[i] : NULL, &rd, &ot->data,
                                 &E->changed[i], s, err);
        if (r != WSYNC_OK) return r;
        if (E->o->result_digests_out) E->o->result_digests_out[i] = rd;
        ot->shape = ot->data.len;
        return WSYNC_OK;
    } else {
        /* trl-v1 and trl-v3: indices (or gaps) and values (wsync__all_positions, wsync__trl_gather) */
        size_t count = 0, k, nlen = strlen(b->name);
        int v3 = E->enc == WSYNC_ENCODING_TRL_V3;
        wsync__out_tensor *oi = &E->outs[2 * i], *ov = &E->outs[2 * i + 1];
        wsync__buf *posbuf = &E->posbuf[worker];
        if (E->o->result_digests_out) E->o->result_digests_out[i] = wsync_digest(x->data, (size_t)x->nbytes);
        if ((r = wsync__all_positions(b, x, w, nelem, posbuf, s->pos, s->cap, &count, err)) != WSYNC_OK) return r;
        E->changed[i] = count;
        if (count == 0) return WSYNC_OK;
        oi->data.a = ov->data.a = a;
        oi->name = (char *)wsync__alloc(a, nlen + 9);
        ov->name = (char *)wsync__alloc(a, nlen + 9);
        if (!oi->name || !ov->name || !wsync__buf_reserve(&ov->data, count * w) ||
            !wsync__buf_reserve(&oi->data, count * 4))
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, b->name, nlen, "%s", "trl arrays");
        memcpy(oi->name, b->name, nlen);
        strcpy(oi->name + nlen, v3 ? ".idx" : ".indices");
        memcpy(ov->name, b->name, nlen);
        strcpy(ov->name + nlen, v3 ? ".val" : ".values");
        ov->dtype = b->dtype;
        ov->shape = count;
        ov->data.len = count * w;
        oi->shape = count;
        if (!v3) {
            oi->dtype = WSYNC_DTYPE_I32;
            memcpy(oi->data.p, posbuf->p, count * 4);
            oi->data.len = count * 4;
        } else {
            uint32_t prev = 0, maxgap = 0, p;
            for (k = 0; k < count; k++) {
                memcpy(&p, posbuf->p + 4 * k, 4);
                if (p - prev > maxgap) maxgap = p - prev;
                prev = p + 1;
            }
            oi->dtype = maxgap > 0xFFFF ? WSYNC_DTYPE_U32 : WSYNC_DTYPE_U16;
            prev = 0;
            for (k = 0; k < count; k++) {
                uint32_t gap;
                memcpy(&p, posbuf->p + 4 * k, 4);
                gap = p - prev;
                prev = p + 1;
                if (oi->dtype == WSYNC_DTYPE_U16) {
                    uint16_t g16 = (uint16_t)gap;
                    memcpy(oi->data.p + 2 * k, &g16, 2);
                } else {
                    memcpy(oi->data.p + 4 * k, &gap, 4);
                }
            }
            oi->data.len = count * (oi->dtype == WSYNC_DTYPE_U16 ? 2 : 4);
        }
        {
            uint8_t *upd = (E->o->flags & WSYNC_DELTA_UPDATE_BASE) ? (uint8_t *)b->data : NULL;
            const uint8_t *src = (const uint8_t *)x->data;
            WSYNC__BY_WIDTH(w, wsync__trl_gather, ov->data.p, src, posbuf->p, count, upd);
        }
        return WSYNC_OK;
    }
}

/* Packed on several threads, step 1: a run of blocks of one tensor. */
static wsync_result wsync__encode_item(void *user, unsigned worker, size_t k, wsync_error *err)
{
    wsync__enc *E = (wsync__enc *)user;
    wsync__eitem *it = &E->items[k];
    size_t i = it->tensor;
    uint64_t bi, blk = (uint64_t)1 << E->block_log2;
    int coder = E->coder;
    for (bi = it->b0; bi < it->b1; bi++) {
        uint64_t c = 0;
        wsync_result r = wsync__encode_block(&it->buf, &E->base[i], &E->next[i], E->width[i], E->nelem[i], blk, bi,
                                             coder, E->top[i], (E->o->flags & WSYNC_DELTA_UPDATE_BASE) != 0,
                                             &E->scratch[worker], NULL, &E->sizes[i][bi], &c, err);
        if (r != WSYNC_OK) return r;
        it->changed += c;
    }
    return WSYNC_OK;
}

/* Step 2: digests (whole-tensor passes) and the stream, from the runs. */
static wsync_result wsync__encode_finish(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__enc *E = (wsync__enc *)user;
    const wsync_tensor *b = &E->base[i], *x = &E->next[i];
    uint64_t blk = (uint64_t)1 << E->block_log2, nblocks = (E->nelem[i] + blk - 1) / blk, changed = 0, bd, rd, bi;
    size_t k, total, fixed, at;
    wsync__out_tensor *ot = &E->outs[i];
    int coder = E->coder;
    (void)worker;
    for (k = E->item_first[i]; k < E->n_items && E->items[k].tensor == i; k++) changed += E->items[k].changed;
    bd = E->o->base_digests ? E->o->base_digests[i] : wsync_digest(b->data, (size_t)b->nbytes);
    rd = wsync_digest(x->data, (size_t)x->nbytes);
    if (E->o->result_digests_out) E->o->result_digests_out[i] = rd;
    fixed = 8 + 8 * (size_t)b->rank + 24 + (WSYNC__CODER_HAS_CLASSES(coder) ? 8 : 0);
    total = fixed + (changed ? 4 * (size_t)nblocks : 0);
    for (k = E->item_first[i]; k < E->n_items && E->items[k].tensor == i; k++) total += E->items[k].buf.len;
    ot->name = (char *)b->name; /* not owned */
    ot->dtype = WSYNC_DTYPE_U8;
    ot->data.a = &E->o->allocator;
    if (!wsync__buf_reserve(&ot->data, total))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, b->name, strlen(b->name), "%s",
                           "delta stream buffer");
    at = wsync__stream_header(ot->data.p, b, E->block_log2, coder, E->top[i], changed, bd, rd);
    if (changed) {
        for (bi = 0; bi < nblocks; bi++) wsync__put_le32(ot->data.p + at + 4 * bi, E->sizes[i][bi]);
        at += 4 * (size_t)nblocks;
        for (k = E->item_first[i]; k < E->n_items && E->items[k].tensor == i; k++) {
            if (E->items[k].buf.len) memcpy(ot->data.p + at, E->items[k].buf.p, E->items[k].buf.len);
            at += E->items[k].buf.len;
            wsync__buf_free(&E->items[k].buf);
        }
    }
    ot->data.len = at;
    ot->shape = at;
    E->changed[i] = changed;
    return WSYNC_OK;
}

/* Cuts every tensor into runs of blocks, with per-tensor block tables. */
static int wsync__encode_plan(wsync__enc *E, size_t n)
{
    const wsync_allocator *a = &E->o->allocator;
    uint64_t blk = (uint64_t)1 << E->block_log2;
    size_t i, total = 0, k = 0;
    E->item_first = (size_t *)wsync__alloc(a, (n + 1) * sizeof *E->item_first);
    E->top = (unsigned *)wsync__alloc(a, (n + 1) * sizeof *E->top);
    E->sizes = (uint32_t **)wsync__alloc(a, (n + 1) * sizeof *E->sizes);
    if (E->sizes) memset(E->sizes, 0, (n + 1) * sizeof *E->sizes); /* before any early return */
    if (!E->item_first || !E->top || !E->sizes) return 0;
    for (i = 0; i < n; i++) {
        uint64_t nb = (E->nelem[i] + blk - 1) / blk;
        total += (size_t)((nb + WSYNC__ENC_ITEM_BLOCKS - 1) / WSYNC__ENC_ITEM_BLOCKS);
    }
    E->items = (wsync__eitem *)wsync__alloc(a, (total + 1) * sizeof *E->items);
    if (!E->items) return 0;
    memset(E->items, 0, (total + 1) * sizeof *E->items);
    for (i = 0; i < n; i++) {
        uint64_t nb = (E->nelem[i] + blk - 1) / blk, b0;
        E->item_first[i] = k;
        E->top[i] = E->enc == WSYNC_ENCODING_PACKED_MAX ? wsync__top_exponent(&E->base[i], E->width[i], E->nelem[i]) : 0;
        E->sizes[i] = (uint32_t *)wsync__alloc(a, (size_t)(nb + 1) * sizeof **E->sizes);
        if (!E->sizes[i]) return 0;
        for (b0 = 0; b0 < nb; b0 += WSYNC__ENC_ITEM_BLOCKS) {
            E->items[k].tensor = i;
            E->items[k].b0 = b0;
            E->items[k].b1 = b0 + WSYNC__ENC_ITEM_BLOCKS < nb ? b0 + WSYNC__ENC_ITEM_BLOCKS : nb;
            E->items[k].buf.a = a;
            k++;
        }
    }
    E->n_items = k;
    return 1;
}

/* wsync_delta_encode's work. Threads over tensors keep the digests fused
   with the diff (one pass over memory); when one tensor alone is more than
   a thread's share, tensors are cut into runs of blocks instead, and the
   digests take passes of their own. */
static wsync_result wsync__encode_run(wsync__enc *E, size_t n, unsigned threads, wsync_delta_options *o,
                                      uint64_t **own_digests, wsync_error *err)
{
    size_t i;
    int split;
    wsync_result r;
    {
        uint64_t most = 0, all = 0;
        for (i = 0; i < n; i++) {
            all += E->nelem[i];
            if (E->nelem[i] > most) most = E->nelem[i];
        }
        split = E->packed && threads > 1 && most > all / threads;
    }
    if (split) {
        /* runs of blocks on every thread, then digests and streams per tensor;
           base digests first when the runs are to update the base */
        if ((o->flags & WSYNC_DELTA_UPDATE_BASE) && !o->base_digests) {
            uint64_t *bd = (uint64_t *)wsync__alloc(&o->allocator, (n + 1) * sizeof *bd);
            if (!bd)
                return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "base digests");
            r = wsync__tensor_digests(E->base, n, threads, bd, err);
            *own_digests = bd;
            o->base_digests = bd;
            if (r != WSYNC_OK) return r;
        }
        if (!wsync__encode_plan(E, n))
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "encoder plan");
        if ((r = wsync__workers_do(threads, E->n_items, wsync__encode_item, E, err)) != WSYNC_OK) return r;
        if ((r = wsync__workers_do(threads, n, wsync__encode_finish, E, err)) != WSYNC_OK) return r;
    } else if ((r = wsync__workers_do(threads, n, wsync__encode_one, E, err)) != WSYNC_OK) {
        return r;
    }
    return WSYNC_OK;
}

/* wsync_delta_encode's output: an entry per stream (trl: per tensor with
   changes), __metadata__ for the encoding, and the file through the
   streaming writer, so that every allocation goes through the caller's. */
static wsync_result wsync__encode_output(const wsync__enc *E, size_t max_out, wsync_st_tensor_desc *descs,
                                         const wsync_delta_options *o, wsync_delta_stats *st, wsync_sink_fn sink,
                                         void *user, wsync_error *err)
{
    size_t n_out = 0, n_meta = 0, i;
    char nums[8][32];
    wsync_st_kv meta[10];
    wsync_st_write_options wo;
    wsync_st_writer sw;
    wsync_result r;
    for (i = 0; i < max_out; i++) {
        if (!E->outs[i].name) continue; /* trl: a tensor without changes */
        descs[n_out].name = E->outs[i].name;
        descs[n_out].dtype = E->outs[i].dtype;
        descs[n_out].rank = 1;
        descs[n_out].shape = &E->outs[i].shape;
        descs[n_out].data = E->outs[i].data.p;
        descs[n_out].nbytes = E->outs[i].data.len;
        descs[n_out].name_len = 0;
        n_out++;
    }
    wsync__fmt_u64(nums[0], sizeof nums[0], o->base_step);
    wsync__fmt_u64(nums[1], sizeof nums[1], o->step);
    wsync__fmt_u64(nums[2], sizeof nums[2], st->changed);
    wsync__fmt_u64(nums[3], sizeof nums[3], st->elements);
    wsync__fmt_u64(nums[4], sizeof nums[4], st->changed_tensors);
    snprintf(nums[5], sizeof nums[5], "%.10g",
             st->elements ? 1.0 - (double)st->changed / (double)st->elements : 1.0);
#define WSYNC__META(k, v) (meta[n_meta].key = (k), meta[n_meta].key_len = 0, meta[n_meta].value = (v), meta[n_meta].value_len = 0, n_meta++)
    if (E->packed) {
        WSYNC__META("format", WSYNC__DELTA_FORMAT);
        WSYNC__META("version", "1");
        WSYNC__META("encoding", wsync_encoding_name(E->enc));
        WSYNC__META("base_step", nums[0]);
        WSYNC__META("step", nums[1]);
        WSYNC__META("changed_elements", nums[2]);
        WSYNC__META("total_elements", nums[3]);
    } else {
        WSYNC__META("format", WSYNC__TRL_FORMAT);
        WSYNC__META("version", "1");
        WSYNC__META("sparse", "True");
        WSYNC__META("model_version", nums[1]);
        WSYNC__META("prev_model_version", nums[0]);
        WSYNC__META("num_changed_params", nums[4]);
        WSYNC__META("total_changed_elements", nums[2]);
        WSYNC__META("total_elements", nums[3]);
        WSYNC__META("sparsity", nums[5]);
        if (E->enc == WSYNC_ENCODING_TRL_V3) WSYNC__META("encoding", "gap_delta");
    }
#undef WSYNC__META
    memset(&wo, 0, sizeof wo);
    wo.allocator = o->allocator;
    /* the streaming writer, so that every allocation goes through ours */
    r = wsync_st_writer_begin(&sw, descs, n_out, meta, n_meta, sink, user, &wo, err);
    for (i = 0; i < n_out && r == WSYNC_OK; i++)
        r = wsync_st_writer_data(&sw, descs[i].data, (size_t)descs[i].nbytes, err);
    if (r == WSYNC_OK) r = wsync_st_writer_end(&sw, err);
    if (r == WSYNC_OK) st->bytes = 8 + sw.header_len + sw.data_len;
    return r;
}

WSYNC_DEF wsync_result wsync_delta_encode(const wsync_tensor *base, const wsync_tensor *next, size_t n,
                                          const wsync_delta_options *opt, wsync_sink_fn sink,
                                          void *user, wsync_delta_stats *stats, wsync_error *err)
{
    wsync_delta_options o;
    wsync__enc E;
    wsync_st_tensor_desc *descs = NULL;
    size_t i, max_out, scratch_elems;
    unsigned threads, t;
    wsync_result r = WSYNC_OK;
    wsync_delta_stats st;
    uint64_t *own_digests = NULL;

    wsync__error_reset(err);
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    memset(&E, 0, sizeof E);
    E.base = base;
    E.next = next;
    E.o = &o;
    E.enc = o.encoding ? o.encoding : WSYNC_ENCODING_PACKED;
    E.packed = E.enc == WSYNC_ENCODING_PACKED || E.enc == WSYNC_ENCODING_PACKED_MAX;
    E.block_log2 = o.block_log2 ? o.block_log2 : E.enc == WSYNC_ENCODING_PACKED_MAX ? 18 : 16;
    E.coder = E.enc != WSYNC_ENCODING_PACKED_MAX      ? WSYNC__CODER_RICE
              : (o.flags & WSYNC_DELTA_RANGE_CODER) ? WSYNC__CODER_ARITH
                                                    : WSYNC__CODER_CRICE;
    if (!sink || (n && (!base || !next)))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_delta_encode needs tensors and a sink");
    if (E.enc < WSYNC_ENCODING_PACKED || E.enc > WSYNC_ENCODING_TRL_V3)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "unknown encoding %d",
                           (int)E.enc);
    if (E.block_log2 < 6 || E.block_log2 > WSYNC_DELTA_MAX_BLOCK_LOG2)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "block_log2 %u outside 6..%u",
                           E.block_log2, WSYNC_DELTA_MAX_BLOCK_LOG2);
    threads = wsync__threads(o.threads);
    if (threads > n) threads = n ? (unsigned)n : 1;
    memset(&st, 0, sizeof st);
    st.encoding = E.enc;
    st.has_steps = 1;
    st.base_step = o.base_step;
    st.step = o.step;
    st.has_base = 1; /* both encodings write it */

    max_out = E.packed ? n : 2 * n;
    E.outs = (wsync__out_tensor *)wsync__alloc(&o.allocator, (max_out + 1) * sizeof *E.outs);
    descs = (wsync_st_tensor_desc *)wsync__alloc(&o.allocator, (max_out + 1) * sizeof *descs);
    E.width = (unsigned *)wsync__alloc(&o.allocator, (n + 1) * sizeof *E.width);
    E.nelem = (uint64_t *)wsync__alloc(&o.allocator, (n + 1) * sizeof *E.nelem);
    E.changed = (uint64_t *)wsync__alloc(&o.allocator, (n + 1) * sizeof *E.changed);
    E.scratch = (wsync__encblk *)wsync__alloc(&o.allocator, threads * sizeof *E.scratch);
    E.posbuf = (wsync__buf *)wsync__alloc(&o.allocator, threads * sizeof *E.posbuf);
    if (E.outs) memset(E.outs, 0, (max_out + 1) * sizeof *E.outs);
    if (E.scratch) memset(E.scratch, 0, threads * sizeof *E.scratch);
    if (E.posbuf) memset(E.posbuf, 0, threads * sizeof *E.posbuf);
    if (!E.outs || !descs || !E.width || !E.nelem || !E.changed || !E.scratch || !E.posbuf) {
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "encoder state");
        goto done;
    }
    /* Every pair is checked before any work starts. */
    for (i = 0; i < n; i++) {
        if ((r = wsync__check_pair(&base[i], &next[i], &E.width[i], &E.nelem[i], err)) != WSYNC_OK) goto done;
        if (!E.packed && E.nelem[i] > 0x7FFFFFFFu) {
            r = wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, base[i].name, strlen(base[i].name),
                            "%llu elements: trl encodings index with 32-bit integers",
                            (unsigned long long)E.nelem[i]);
            goto done;
        }
        E.changed[i] = 0;
    }
    /* Scratch for a block, or for the largest tensor when that is smaller. */
    {
        uint64_t most = 1;
        for (i = 0; i < n; i++)
            if (E.nelem[i] > most) most = E.nelem[i];
        scratch_elems = most < ((uint64_t)1 << E.block_log2) ? (size_t)most : (size_t)1 << E.block_log2;
    }
    for (t = 0; t < threads; t++) {
        E.posbuf[t].a = &o.allocator;
        if (!wsync__encblk_init(&E.scratch[t], scratch_elems, E.coder, &o.allocator)) {
            r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "encoder scratch");
            goto done;
        }
    }
    if ((r = wsync__encode_run(&E, n, threads, &o, &own_digests, err)) != WSYNC_OK) goto done;

    for (i = 0; i < n; i++) {
        st.tensors++;
        st.elements += E.nelem[i];
        st.changed += E.changed[i];
        if (E.changed[i]) st.changed_tensors++;
    }
    r = wsync__encode_output(&E, max_out, descs, &o, &st, sink, user, err);
done:
    if (E.outs)
        for (i = 0; i < max_out; i++) {
            if (!E.packed) wsync__free(&o.allocator, E.outs[i].name);
            wsync__buf_free(&E.outs[i].data);
        }
    if (E.scratch)
        for (t = 0; t < threads; t++) wsync__encblk_free(&E.scratch[t], &o.allocator);
    if (E.posbuf)
        for (t = 0; t < threads; t++) wsync__buf_free(&E.posbuf[t]);
    wsync__free(&o.allocator, E.outs);
    wsync__free(&o.allocator, descs);
    wsync__free(&o.allocator, E.width);
    wsync__free(&o.allocator, E.nelem);
    wsync__free(&o.allocator, E.changed);
    wsync__free(&o.allocator, E.scratch);
    wsync__free(&o.allocator, E.posbuf);
    if (E.items)
        for (i = 0; i < E.n_items; i++) wsync__buf_free(&E.items[i].buf);
    if (E.sizes)
        for (i = 0; i < n; i++) wsync__free(&o.allocator, E.sizes[i]);
    wsync__free(&o.allocator, E.items);
    wsync__free(&o.allocator, E.item_first);
    wsync__free(&o.allocator, E.top);
    wsync__free(&o.allocator, E.sizes);
    wsync__free(&o.allocator, own_digests);
    if (stats && r == WSYNC_OK) *stats = st;
    return r;
}

#endif /* WSYNC_NO_ENCODE */

/* ---- reading deltas: which encoding (wsync__detect), steps, wsync_delta_info >>delta-read ---- */

static wsync_result wsync__detect(const wsync_st_file *f, wsync_encoding *enc, wsync_error *err)
{
    const char *format = wsync_st_metadata_get(f, "format");
    size_t i;
    if (format && strcmp(format, WSYNC__DELTA_FORMAT) == 0) {
        const char *v = wsync_st_metadata_get(f, "version");
        const char *e = wsync_st_metadata_get(f, "encoding");
        if (!v || strcmp(v, "1") != 0)
            return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0,
                               "wsync-delta version \"%s\" (this reader knows 1)", v ? v : "(none)");
        *enc = wsync_encoding_from_name(e);
        if (*enc != WSYNC_ENCODING_PACKED && *enc != WSYNC_ENCODING_PACKED_MAX)
            return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0,
                               "wsync-delta encoding \"%s\"", e ? e : "(none)");
        return WSYNC_OK;
    }
    if (format && strcmp(format, WSYNC__TRL_FORMAT) != 0)
        return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0,
                           "not a delta: __metadata__ format is \"%s\"", format);
    /* TRL, or no metadata at all: the tensor names decide. */
    *enc = (wsync_encoding)0;
    for (i = 0; i < f->n_tensors; i++) {
        const wsync_st_tensor *t = &f->tensors[i];
        if (t->name_len >= 4 && memcmp(t->name + t->name_len - 4, ".idx", 4) == 0) *enc = WSYNC_ENCODING_TRL_V3;
        else if (t->name_len >= 8 && memcmp(t->name + t->name_len - 8, ".indices", 8) == 0 && !*enc)
            *enc = WSYNC_ENCODING_TRL_V1;
    }
    if (!*enc) {
        const char *e = wsync_st_metadata_get(f, "encoding");
        if (!format)
            return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s",
                               "not a delta: no __metadata__ format and no .indices/.idx tensors");
        *enc = e && strcmp(e, "gap_delta") == 0 ? WSYNC_ENCODING_TRL_V3 : WSYNC_ENCODING_TRL_V1;
    }
    return WSYNC_OK;
}

static wsync_result wsync__stats_from_meta(const wsync_st_file *f, wsync_encoding enc, wsync_delta_stats *st)
{
    const char *b, *s;
    char *end;
    st->encoding = enc;
    if (enc == WSYNC_ENCODING_PACKED || enc == WSYNC_ENCODING_PACKED_MAX) {
        b = wsync_st_metadata_get(f, "base_step");
        s = wsync_st_metadata_get(f, "step");
    } else {
        b = wsync_st_metadata_get(f, "prev_model_version");
        s = wsync_st_metadata_get(f, "model_version");
    }
    if (s && *s >= '0' && *s <= '9') {
        st->step = strtoull(s, &end, 10);
        st->has_steps = *end == 0;
        st->base_step = st->step ? st->step - 1 : 0;
        if (st->has_steps && b && *b >= '0' && *b <= '9') {
            uint64_t v = strtoull(b, &end, 10);
            if (*end == 0) st->base_step = v, st->has_base = 1;
        }
    }
    return WSYNC_OK;
}

static wsync_result wsync__open_delta(const void *delta, uint64_t size, const wsync_allocator *a,
                                      wsync_st_file *f, wsync_encoding *enc, wsync_error *err)
{
    wsync_st_options so;
    wsync_result r;
    memset(&so, 0, sizeof so);
    so.allocator = *a;
    if ((r = wsync_st_parse(delta, size, &so, f, err)) != WSYNC_OK) return r;
    if ((r = wsync__detect(f, enc, err)) != WSYNC_OK) wsync_st_free(f);
    return r;
}

WSYNC_DEF wsync_result wsync_delta_info(const void *delta, uint64_t size, wsync_delta_stats *out, wsync_error *err)
{
    wsync_st_file f;
    wsync_encoding enc;
    wsync_allocator a;
    wsync_result r;
    size_t i;
    wsync__error_reset(err);
    if (!out) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no output");
    memset(&a, 0, sizeof a);
    memset(out, 0, sizeof *out);
    if ((r = wsync__open_delta(delta, size, &a, &f, &enc, err)) != WSYNC_OK) return r;
    wsync__stats_from_meta(&f, enc, out);
    out->bytes = size;
    for (i = 0; i < f.n_tensors; i++) {
        const wsync_st_tensor *t = &f.tensors[i];
        if (enc == WSYNC_ENCODING_PACKED || enc == WSYNC_ENCODING_PACKED_MAX) {
            uint64_t sz = t->end - t->begin, ne = 1;
            unsigned rank, d;
            if (t->dtype != WSYNC_DTYPE_U8 || sz < 8 || memcmp(t->data, WSYNC__STREAM_MAGIC, 4) != 0 ||
                sz < 32 + 8 * (uint64_t)t->data[6]) {
                r = wsync__fail(err, WSYNC_ERR_INVALID_HEADER, t->key_offset, t->name, t->name_len, "%s",
                                "not a packed delta stream");
                break;
            }
            rank = t->data[6];
            for (d = 0; d < rank; d++)
                if (!wsync_mul_u64(ne, wsync__load_le64(t->data + 8 + 8 * d), &ne)) ne = UINT64_MAX;
            out->tensors++;
            out->elements += ne;
            out->changed += wsync__load_le64(t->data + 8 + 8 * rank);
            if (wsync__load_le64(t->data + 8 + 8 * rank)) out->changed_tensors++;
        } else {
            int v3 = enc == WSYNC_ENCODING_TRL_V3;
            size_t sfx = v3 ? 4 : 8;
            if (t->name_len >= sfx && memcmp(t->name + t->name_len - sfx, v3 ? ".idx" : ".indices", sfx) == 0) {
                out->tensors++;
                out->changed_tensors++;
                out->changed += t->nelem;
            }
        }
    }
    if (r == WSYNC_OK && enc != WSYNC_ENCODING_PACKED && enc != WSYNC_ENCODING_PACKED_MAX) {
        const char *te = wsync_st_metadata_get(&f, "total_elements");
        if (te) out->elements = strtoull(te, NULL, 10);
    }
    wsync_st_free(&f);
    return r;
}

/* ---- applying: decode and check, digests, then write >>delta-apply ---- */

/* The pieces the digest and write phases run per patch come first. */

/* The changes of a packed-max list that fall in a piece of the target
   copied to scratch (bytes off.. of the target, elements before end_elem):
   the change at *atp, its value at *vp, is the next one to place (entry
   *kp of n); all three move on past the piece. */
WSYNC__INLINE void wsync__list_overlay(uint8_t *scratch, uint64_t off, uint64_t end_elem, const uint8_t **vp,
                                       uint64_t *kp, uint64_t n, uint64_t *nextp, uint64_t *atp, const unsigned w)
{
    const uint8_t *v = *vp;
    uint64_t k = *kp, next = *nextp, at = *atp;
    for (; k < n && at < end_elem; k++) {
        memcpy(scratch + (at * w - off), v, w);
        if (k + 1 < n) v = wsync__list_entry(v + w, &next, &at);
    }
    *vp = v;
    *kp = k;
    *nextp = next;
    *atp = at;
}

/* Base and result digests of a target without changing it. Rice blocks are
   decoded into a one-block scratch copy, which also checks them (the check
   was deferred to here); other patches are applied to 1 MiB pieces. With
   no_base the base digest is not computed (*base_d is then 0). */
static wsync_result wsync__verify_digests(const wsync__patch *pt, uint8_t *scratch, size_t scratch_bytes,
                                          int no_base, uint64_t *base_d, uint64_t *result_d, wsync_error *err)
{
    const uint8_t *data = (const uint8_t *)pt->target->data, *v = NULL;
    uint64_t nbytes = pt->target->nbytes, off, k = 0, next = 0, at = 0;
    wsync_digest_state db, dr;
    wsync_digest_init(&db);
    wsync_digest_init(&dr);
    if (pt->rice) {
        uint64_t bi, soff = pt->data_at, total = 0;
        for (bi = 0; bi < pt->nblocks; bi++) {
            uint32_t bsize = wsync__get_le32(pt->stream + pt->table_at + 4 * bi);
            uint64_t first = bi * pt->blk, len = pt->nelem - first < pt->blk ? pt->nelem - first : pt->blk, c = 0;
            const uint8_t *blk = data + first * pt->w;
            size_t bytes = (size_t)(len * pt->w);
            const char *why = "";
            wsync_result r;
            if (!no_base) wsync_digest_update(&db, blk, bytes);
            if (bsize) {
                memcpy(scratch, blk, bytes);
                r = wsync__rice_patch_block(pt, bi, soff, data, scratch, pt->count - total, &c, &why);
                if (r != WSYNC_OK)
                    return wsync__fail(err, r, pt->src->key_offset, pt->src->name, pt->src->name_len,
                                       "block %llu (stream byte %llu): %s", (unsigned long long)bi,
                                       (unsigned long long)soff, why);
                total += c;
                wsync_digest_update(&dr, scratch, bytes);
            } else {
                wsync_digest_update(&dr, blk, bytes);
            }
            soff += bsize;
        }
        if (total != pt->count)
            return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, pt->src->key_offset, pt->src->name, pt->src->name_len,
                               "blocks hold %llu changes, the header says %llu", (unsigned long long)total,
                               (unsigned long long)pt->count);
        *base_d = no_base ? 0 : wsync_digest_final(&db);
        *result_d = wsync_digest_final(&dr);
        return WSYNC_OK;
    }
    if (pt->count) v = wsync__list_entry(pt->list, &next, &at);
    for (off = 0; off < nbytes; off += scratch_bytes) {
        size_t len = nbytes - off < scratch_bytes ? (size_t)(nbytes - off) : scratch_bytes;
        uint64_t end_elem = (off + len) / pt->w;
        if (!no_base) wsync_digest_update(&db, data + off, len);
        memcpy(scratch, data + off, len);
        WSYNC__BY_WIDTH(pt->w, wsync__list_overlay, scratch, off, end_elem, &v, &k, pt->count, &next, &at);
        wsync_digest_update(&dr, scratch, len);
    }
    *base_d = no_base ? 0 : wsync_digest_final(&db);
    *result_d = wsync_digest_final(&dr);
    return WSYNC_OK;
}

/* Writes the n changes of a packed-max list, with a second reader 64
   changes ahead prefetching their targets. */
WSYNC__INLINE void wsync__list_write(const uint8_t *list, uint64_t n, uint8_t *data, const unsigned w)
{
    const uint8_t *q = list, *qa = list;
    uint64_t next = 0, na = 0, at, aa, k;
    for (k = 0; k < n && k < 64; k++) qa = wsync__list_entry(qa, &na, &aa) + w;
    for (k = 0; k < n; k++) {
        if (k + 64 < n) {
            qa = wsync__list_entry(qa, &na, &aa) + w;
            WSYNC__PREFETCH(data + (size_t)aa * w);
        }
        q = wsync__list_entry(q, &next, &at);
        memcpy(data + (size_t)at * w, q, w);
        q += w;
    }
}

/* Writes a decoded packed-max patch or a trl patch (Rice patches are
   written block by block by wsync__apply_write). */
static void wsync__patch_write(const wsync__patch *pt, int trl_v3)
{
    uint8_t *data = (uint8_t *)pt->target->data;
    unsigned w = pt->w;
    if (!pt->vals) /* packed-max: its list (wsync__list_entry) */
        WSYNC__BY_WIDTH(w, wsync__list_write, pt->list, pt->count, data);
    else
        WSYNC__BY_WIDTH(w, wsync__trl_write_w, pt->src->data, wsync_dtype_bits(pt->src->dtype) / 8, trl_v3,
                        pt->vals->data, pt->count, data);
}

/* State shared by the apply phases; entry i of the file is patch i. */
typedef struct wsync__app {
    const wsync_st_file *f;
    wsync_encoding enc;
    int packed;
    wsync_tensor **sorted;
    size_t n_targets;
    const wsync_delta_options *o;
    wsync__patch *patches;
    uint8_t **scratch;   /* one per worker, for the digest phase */
    size_t scratch_bytes;
    wsync__pmx *pmx;     /* one per worker, for packed-max decoding */
    /* work items for the check and write phases: runs of Rice blocks, so
       that one large tensor is shared among threads; other patches whole */
    struct wsync__item *items;
    size_t n_items;
    /* the report (on_changes): the caller's targets, a chunk buffer per
       worker (positions, then values) */
    wsync_tensor *targets;
    uint8_t **rep;
    size_t chunk;
    size_t *order;       /* parallel report: entries, most changes first */
    size_t *item0;       /* the report: entry i's items are [item0[i], item0[i + 1]) */
    uint8_t *cap;        /* the capture's memory (the items' cap_pos and cap_val) */
} wsync__app;

typedef struct wsync__item {
    size_t patch;
    uint64_t b0, b1;  /* Rice blocks [b0, b1) */
    uint64_t soff;    /* stream offset of block b0 */
    uint64_t count;   /* check phase: changes found */
    /* the report's capture (see WSYNC__CAPTURE_MAX): the write phase keeps
       the item's changes, positions from element b0 * blk, new values */
    uint32_t *cap_pos;
    uint8_t *cap_val;
    uint64_t cap_n;
} wsync__item;

/* When on_changes is given, the write phase keeps the changes it decodes
   from Rice streams (4 + width bytes a change) for the report, up to this
   many bytes in all, item by item in the file's order; the report decodes
   the rest again. */
#ifndef WSYNC__CAPTURE_MAX /* (tests set a small one) */
#define WSYNC__CAPTURE_MAX ((uint64_t)64 << 20)
#endif

#define WSYNC__ITEM_BLOCKS 16

/* Phase 1: decode and check entry i. */
static wsync_result wsync__apply_decode(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__app *A = (wsync__app *)user;
    const wsync_st_tensor *t = &A->f->tensors[i];
    int v3 = A->enc == WSYNC_ENCODING_TRL_V3;
    size_t sfx = v3 ? 4 : 8, vsfx = v3 ? 4 : 7;
    const char *ext = v3 ? ".idx" : ".indices", *vext = v3 ? ".val" : ".values";
    if (A->o->flags & WSYNC_DELTA_PARTIAL) {
        /* an entry whose tensor no target holds is skipped (its values
           too: the indices are the entry) */
        size_t len = t->name_len;
        if (!A->packed) {
            if (len >= sfx && memcmp(t->name + len - sfx, ext, sfx) == 0) len -= sfx;
            else if (len >= vsfx && memcmp(t->name + len - vsfx, vext, vsfx) == 0) len -= vsfx;
        }
        if (!wsync__target_find(A->sorted, A->n_targets, t->name, len)) return WSYNC_OK;
    }
    if (A->packed)
        return wsync__packed_patch(&A->patches[i], t, A->sorted, A->n_targets, &A->o->allocator,
                                   !(A->o->flags & WSYNC_DELTA_SKIP_BASE_DIGEST), 1, &A->pmx[worker], err);
    if (t->name_len >= sfx && memcmp(t->name + t->name_len - sfx, ext, sfx) == 0)
        return wsync__trl_patch(&A->patches[i], A->f, t, v3, A->sorted, A->n_targets, err);
    if (t->name_len >= vsfx && memcmp(t->name + t->name_len - vsfx, vext, vsfx) == 0) {
        /* a values tensor: its indices must exist (they carry the checks) */
        if (!wsync__find_suffixed(A->f, t->name, t->name_len - vsfx, ext))
            return wsync__fail(err, WSYNC_ERR_NOT_FOUND, t->key_offset, t->name, t->name_len,
                               "values without %s", ext);
        return WSYNC_OK;
    }
    return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, t->key_offset, t->name, t->name_len,
                       "entries of a %s delta end in %s or %s", wsync_encoding_name(A->enc), ext, vext);
}

/* Phase 2 (packed encodings): both digests of entry i's target. */
static wsync_result wsync__apply_verify(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__app *A = (wsync__app *)user;
    const wsync__patch *pt = &A->patches[i];
    unsigned flags = A->o->flags;
    uint64_t bd, rd;
    const char *nm;
    if (!pt->target || (pt->count == 0 && (flags & WSYNC_DELTA_SKIP_BASE_DIGEST))) return WSYNC_OK;
    nm = pt->target->name;
    {
        wsync_result r = wsync__verify_digests(pt, A->scratch[worker], A->scratch_bytes - A->scratch_bytes % pt->w,
                                               (flags & WSYNC_DELTA_SKIP_BASE_DIGEST) != 0, &bd, &rd, err);
        if (r != WSYNC_OK) return r;
    }
    if (!(flags & WSYNC_DELTA_SKIP_BASE_DIGEST) && bd != pt->base_digest)
        return wsync__fail(err, WSYNC_ERR_DIGEST_MISMATCH, pt->src->key_offset, nm, strlen(nm),
                           "the target is not this delta's base (digest %016llx, expected %016llx)",
                           (unsigned long long)bd, (unsigned long long)pt->base_digest);
    if (!(flags & WSYNC_DELTA_SKIP_RESULT_DIGEST) && rd != pt->result_digest)
        return wsync__fail(err, WSYNC_ERR_DIGEST_MISMATCH, pt->src->key_offset, nm, strlen(nm),
                           "the patched tensor would not match the trainer's (digest %016llx, expected %016llx)",
                           (unsigned long long)rd, (unsigned long long)pt->result_digest);
    return WSYNC_OK;
}

/* Splits the patches into work items (see wsync__item). */
static int wsync__apply_items(wsync__app *A, const wsync_allocator *a)
{
    size_t i, n = 0, k = 0;
    for (i = 0; i < A->f->n_tensors; i++) {
        const wsync__patch *pt = &A->patches[i];
        if (!pt->target) continue;
        n += pt->rice ? (size_t)((pt->nblocks + WSYNC__ITEM_BLOCKS - 1) / WSYNC__ITEM_BLOCKS) : 1;
    }
    A->items = (wsync__item *)wsync__alloc(a, (n + 1) * sizeof *A->items);
    if (!A->items) return 0;
    for (i = 0; i < A->f->n_tensors; i++) {
        const wsync__patch *pt = &A->patches[i];
        uint64_t bi, soff;
        if (!pt->target) continue;
        if (!pt->rice) {
            memset(&A->items[k], 0, sizeof A->items[k]);
            A->items[k++].patch = i;
            continue;
        }
        soff = pt->data_at;
        for (bi = 0; bi < pt->nblocks; bi++) {
            if (bi % WSYNC__ITEM_BLOCKS == 0) {
                memset(&A->items[k], 0, sizeof A->items[k]);
                A->items[k].patch = i;
                A->items[k].b0 = bi;
                A->items[k].b1 = bi + WSYNC__ITEM_BLOCKS < pt->nblocks ? bi + WSYNC__ITEM_BLOCKS : pt->nblocks;
                A->items[k].soff = soff;
                A->items[k].count = 0;
                k++;
            }
            soff += wsync__get_le32(pt->stream + pt->table_at + 4 * bi);
        }
    }
    A->n_items = k;
    return 1;
}

/* Check phase (digests off): the Rice blocks of item i, without the base. */
static wsync_result wsync__apply_check(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__app *A = (wsync__app *)user;
    wsync__item *it = &A->items[i];
    const wsync__patch *pt = &A->patches[it->patch];
    uint64_t bad = 0, bad_off = 0;
    const char *why = "";
    wsync_result r;
    (void)worker;
    if (!pt->rice) return WSYNC_OK;
    r = wsync__rice_check_blocks(pt->stream, pt->table_at, it->soff, it->b0, it->b1, pt->blk, pt->nelem, pt->w,
                                 pt->count, 0, &it->count, &bad, &bad_off, &why);
    if (r != WSYNC_OK)
        return wsync__fail(err, r, pt->src->key_offset, pt->src->name, pt->src->name_len,
                           "block %llu (stream byte %llu): %s", (unsigned long long)bad, (unsigned long long)bad_off,
                           why);
    return WSYNC_OK;
}

/* Write phase with the capture: item it's blocks decoded (as wsync__rs_rest
   does), written in place, and their changes kept. */
WSYNC__INLINE void wsync__apply_write_cap(const wsync__patch *pt, const wsync__item *it, const unsigned w)
{
    const unsigned vbits = 8 * w;
    const uint64_t vmask = w == 8 ? ~(uint64_t)0 : (((uint64_t)1) << vbits) - 1;
    uint8_t *data = (uint8_t *)pt->target->data;
    uint64_t bi, soff = it->soff, n = 0;
    uint32_t at_buf[WSYNC__RICE_CHUNK];
    uint64_t code_buf[WSYNC__RICE_CHUNK];
    uint8_t raw_buf[WSYNC__RICE_CHUNK];
    for (bi = it->b0; bi < it->b1; bi++) {
        uint32_t bsize = wsync__get_le32(pt->stream + pt->table_at + 4 * bi);
        uint64_t first = bi * pt->blk, len = pt->nelem - first < pt->blk ? pt->nelem - first : pt->blk;
        uint32_t rel = (uint32_t)(first - it->b0 * pt->blk);
        uint8_t *out = data + first * w;
        wsync__rs s;
        const char *why;
        if (bsize && wsync__rs_open(&s, pt->stream + soff, bsize, len, pt->count, &why) == WSYNC_OK) {
            while (s.i < s.count) {
                uint64_t m = s.count - s.i < WSYNC__RICE_CHUNK ? s.count - s.i : WSYNC__RICE_CHUNK, j;
                for (j = 0; j < m; j++) {
                    uint64_t at = 0, code = 0;
                    int kind = 0;
                    const uint8_t *t;
                    if (wsync__rs_step(&s, vbits, &at, &code, &kind, &why) != WSYNC_OK) return;
                    t = out + (size_t)at * w;
                    WSYNC__PREFETCH(t);
                    wsync__prefetch_l2(t, 8192);
                    wsync__prefetch_l2(t, 8192 + 64);
                    at_buf[j] = (uint32_t)at;
                    code_buf[j] = code;
                    raw_buf[j] = (uint8_t)(kind - 1);
                }
                for (j = 0; j < m; j++) {
                    uint64_t z = code_buf[j], b = wsync__elem_load(out + (size_t)at_buf[j] * w, w);
                    uint64_t x = wsync__unord((wsync__ord(b, w) + wsync__unzz(z)) & vmask, w);
                    x = raw_buf[j] ? z : x;
                    wsync__elem_store(out + (size_t)at_buf[j] * w, w, x);
                    if (n < it->cap_n) { /* (the blocks' counts, checked: always) */
                        it->cap_pos[n] = rel + at_buf[j];
                        wsync__elem_store(it->cap_val + n * w, w, x);
                        n++;
                    }
                }
            }
        }
        soff += bsize;
    }
}

/* Write phase: item i (cannot fail: everything was checked). */
static wsync_result wsync__apply_write(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__app *A = (wsync__app *)user;
    const wsync__item *it = &A->items[i];
    const wsync__patch *pt = &A->patches[it->patch];
    (void)worker;
    (void)err;
    if (pt->rice && it->cap_pos) {
        WSYNC__BY_WIDTH(pt->w, wsync__apply_write_cap, pt, it);
    } else if (pt->rice) {
        uint8_t *data = (uint8_t *)pt->target->data;
        uint64_t bi, soff = it->soff, c;
        const char *why;
        for (bi = it->b0; bi < it->b1; bi++) {
            wsync__rice_patch_block(pt, bi, soff, data, data + bi * pt->blk * pt->w, pt->blk, &c, &why);
            soff += wsync__get_le32(pt->stream + pt->table_at + 4 * bi);
        }
    } else {
        wsync__patch_write(pt, A->enc == WSYNC_ENCODING_TRL_V3);
    }
    return WSYNC_OK;
}

/* Phase 4, the report: a chunk being filled for on_changes. Positions are
   decoded into the chunk with their targets prefetched, and their values
   gathered WSYNC__REP_BATCH at a time, a batch behind the decoding, so the
   misses of one batch overlap the decoding of the next. */
#define WSYNC__REP_BATCH 128u

typedef struct wsync__rep {
    const wsync_delta_options *o;
    wsync_changes c;
    uint64_t *pos;
    uint8_t *val;
    const uint8_t *data;
    uint64_t k, g, left; /* in the chunk; of them gathered; still to hand in the tensor */
    size_t chunk;
    int rc;
} wsync__rep;

WSYNC__INLINE void wsync__rep_gather(wsync__rep *R, const unsigned w)
{
    uint64_t j;
    for (j = R->g; j < R->k; j++) memcpy(R->val + j * w, R->data + (size_t)R->pos[j] * w, w);
    R->g = R->k;
}

static int wsync__rep_flush(wsync__rep *R)
{
    R->c.count = R->k;
    R->c.last = R->left == 0;
    R->k = 0;
    R->g = 0;
    R->rc = R->o->on_changes(R->o->changes_user, &R->c);
    return R->rc;
}

/* Adds position `at` (its value read from the written target); nonzero
   when the callback refused. */
WSYNC__INLINE int wsync__rep_put(wsync__rep *R, uint64_t at, const unsigned w)
{
    const uint8_t *t = R->data + (size_t)at * w;
    WSYNC__PREFETCH(t);
    R->pos[R->k++] = at;
    R->left--;
    if (R->k == R->chunk || R->left == 0) {
        wsync__rep_gather(R, w);
        return wsync__rep_flush(R);
    }
    /* the batch before the one being decoded: its lines have had a batch's
       decoding to arrive */
    if (R->k - R->g >= 2 * WSYNC__REP_BATCH) {
        uint64_t k = R->k;
        R->k = R->g + WSYNC__REP_BATCH;
        wsync__rep_gather(R, w);
        R->k = k;
    }
    return 0;
}
WSYNC__INLINE void wsync__rep_list(wsync__rep *R, const uint8_t *q, uint64_t n, const unsigned w)
{
    uint64_t k, next = 0, at = 0;
    for (k = 0; k < n; k++) {
        q = wsync__list_entry(q, &next, &at) + w;
        if (wsync__rep_put(R, at, w)) return;
    }
}

WSYNC__INLINE void wsync__rep_trl(wsync__rep *R, const uint8_t *ix, unsigned iw, int v3, uint64_t n, const unsigned w)
{
    uint64_t k, cur = 0;
    for (k = 0; k < n; k++) {
        uint64_t q = wsync__trl_index(ix, k, iw);
        cur = v3 && k ? cur + 1 + q : q;
        if (wsync__rep_put(R, cur, w)) return;
    }
}

/* The changes of a checked Rice stream: an item's from the capture, or its
   positions decoded again (values decoded and dropped), with the unchecked
   reader while WSYNC__RICE_MARGIN bytes are left: the delta was validated
   in full before the write. */
WSYNC__INLINE int wsync__rep_rice_blocks(wsync__rep *R, const wsync__patch *pt, uint64_t b0, uint64_t b1,
                                         uint64_t soff, const unsigned w)
{
    uint64_t bi;
    for (bi = b0; bi < b1; bi++) {
        uint32_t bsize = wsync__get_le32(pt->stream + pt->table_at + 4 * bi);
        uint64_t first = bi * pt->blk, len = pt->nelem - first < pt->blk ? pt->nelem - first : pt->blk;
        if (bsize) {
            wsync__rs rs;
            const char *why;
            uint64_t at = 0, code = 0;
            int kind = 0;
            if (wsync__rs_open(&rs, pt->stream + soff, bsize, len, pt->count, &why) != WSYNC_OK) return 1;
            while (rs.i < rs.count && rs.r.end - rs.r.p >= WSYNC__RICE_MARGIN) {
                wsync__rs_step_fast(&rs, 8 * w, &at, &code, &kind);
                if (wsync__rep_put(R, first + at, w)) return 1;
            }
            while (rs.i < rs.count) {
                if (wsync__rs_step(&rs, 8 * w, &at, &code, &kind, &why) != WSYNC_OK) return 1;
                if (wsync__rep_put(R, first + at, w)) return 1;
            }
        }
        soff += bsize;
    }
    return 0;
}

WSYNC__INLINE void wsync__rep_rice(wsync__rep *R, const wsync__patch *pt, const wsync__item *it, size_t n_items,
                                   const unsigned w)
{
    size_t j;
    if (!it) { /* no items (cannot happen after a write): every block again */
        wsync__rep_rice_blocks(R, pt, 0, pt->nblocks, pt->data_at, w);
        return;
    }
    for (j = 0; j < n_items; j++, it++) {
        if (it->cap_pos) {
            uint64_t k = 0, first = it->b0 * pt->blk;
            if (R->g < R->k) wsync__rep_gather(R, w);
            while (k < it->cap_n) { /* as many as the chunk takes at once */
                uint64_t m = it->cap_n - k, room = R->chunk - R->k, q;
                uint64_t *pos = R->pos + R->k;
                const uint32_t *cp = it->cap_pos + k;
                if (m > room) m = room;
                if (m > R->left) m = R->left;
                if (!m) return; /* (the blocks' counts are the tensor's: checked) */
                for (q = 0; q < m; q++) pos[q] = first + cp[q];
                memcpy(R->val + R->k * w, it->cap_val + k * w, (size_t)m * w);
                R->k += m;
                R->g = R->k;
                R->left -= m;
                k += m;
                if ((R->k == R->chunk || R->left == 0) && wsync__rep_flush(R)) return;
            }
        } else if (wsync__rep_rice_blocks(R, pt, it->b0, it->b1, it->soff, w)) {
            return;
        }
    }
}

/* The parallel report's order: the largest patches first, so that one
   large tensor taken last does not leave the other workers idle. */
typedef struct wsync__rep_ord {
    uint64_t count;
    size_t i;
} wsync__rep_ord;

static int wsync__rep_ord_cmp(const void *a, const void *b)
{
    const wsync__rep_ord *x = (const wsync__rep_ord *)a, *y = (const wsync__rep_ord *)b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Phase 4: entry i's changes to on_changes (after every write). */
static wsync_result wsync__apply_report(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__app *A = (wsync__app *)user;
    const wsync__patch *pt = &A->patches[A->order ? A->order[i] : i];
    wsync_tensor *tg = pt->target ? pt->target : pt->alias_target; /* a tied name: the same changes */
    wsync__rep R;
    unsigned w = pt->w;
    if (!tg || !pt->count) return WSYNC_OK;
    memset(&R, 0, sizeof R);
    R.o = A->o;
    R.c.tensor = tg;
    R.c.index = (size_t)(tg - A->targets);
    R.c.width = w;
    R.data = (const uint8_t *)tg->data;
    if (WSYNC_CHANGES_WHOLE(pt->count, pt->nelem, w)) {
        R.c.whole = 1;
        R.c.count = pt->nelem;
        R.c.values = tg->data;
        R.c.last = 1;
        R.rc = A->o->on_changes(A->o->changes_user, &R.c);
    } else {
        R.pos = (uint64_t *)(void *)A->rep[worker];
        R.val = A->rep[worker] + A->chunk * 8;
        R.c.positions = R.pos;
        R.c.values = R.val;
        R.chunk = A->chunk;
        R.left = pt->count;
        if (pt->rice) {
            size_t e = A->order ? A->order[i] : i;
            /* a tied name has no items of its own: its blocks are decoded again */
            const wsync__item *it0 = A->item0 && pt->target ? &A->items[A->item0[e]] : NULL;
            size_t ni = A->item0 ? A->item0[e + 1] - A->item0[e] : 0;
            WSYNC__BY_WIDTH(w, wsync__rep_rice, &R, pt, it0, ni);
        }
        else if (!pt->vals) WSYNC__BY_WIDTH(w, wsync__rep_list, &R, pt->list, pt->count);
        else
            WSYNC__BY_WIDTH(w, wsync__rep_trl, &R, pt->src->data, wsync_dtype_bits(pt->src->dtype) / 8,
                            A->enc == WSYNC_ENCODING_TRL_V3, pt->count);
    }
    if (R.rc)
        return wsync__fail(err, WSYNC_ERR_SINK, UINT64_MAX, tg->name, strlen(tg->name),
                           "the changes callback returned %d: the targets hold the delta's result, the changes "
                           "after this chunk were not handed", R.rc);
    return WSYNC_OK;
}

/* ---- targets that share memory (tied weights) >>aliases ----
   Two targets whose memory is exactly the same (data, nbytes and dtype:
   an lm_head tied to the token embedding) are one tensor with two names;
   any other overlap is refused, naming both. */

typedef struct wsync__span {
    uintptr_t at;
    size_t i;
} wsync__span;

static int wsync__cmp_span(const void *a, const void *b)
{
    const wsync__span *x = (const wsync__span *)a, *y = (const wsync__span *)b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* alias[i] (n entries) gets the lowest index of the targets sharing i's
   memory (i when none does); *any whether two do. */
static wsync_result wsync__aliases(const wsync_tensor *t, size_t n, const wsync_allocator *a, size_t *alias,
                                   int *any, wsync_error *err)
{
    wsync__span *v;
    size_t i, m = 0, cur = SIZE_MAX;
    uintptr_t end = 0;
    wsync_result r = WSYNC_OK;
    *any = 0;
    for (i = 0; i < n; i++) alias[i] = i;
    if (n < 2) return WSYNC_OK;
    if (!(v = (wsync__span *)wsync__alloc(a, n * sizeof *v)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "targets' memory map");
    for (i = 0; i < n; i++)
        if (t[i].nbytes) v[m].at = (uintptr_t)t[i].data, v[m++].i = i;
    qsort(v, m, sizeof *v, wsync__cmp_span);
    for (i = 0; i < m && r == WSYNC_OK; i++) {
        const wsync_tensor *x = &t[v[i].i];
        if (cur != SIZE_MAX && v[i].at < end) {
            const wsync_tensor *y = &t[cur];
            if ((uintptr_t)y->data == v[i].at && y->nbytes == x->nbytes && y->dtype == x->dtype) {
                alias[v[i].i] = alias[cur];
                *any = 1;
                continue;
            }
            r = wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, x->name, strlen(x->name),
                            "its memory overlaps target '%.100s' without being the same tensor (two names for "
                            "one tensor must have the same data, size and dtype)",
                            y->name);
            break;
        }
        if (cur == SIZE_MAX || (uintptr_t)x->nbytes > ~(uintptr_t)0 - v[i].at ||
            v[i].at + (uintptr_t)x->nbytes > end) {
            cur = v[i].i;
            end = v[i].at + (uintptr_t)x->nbytes;
        }
    }
    wsync__free(a, v);
    return r;
}

static int wsync__same_entry(const wsync_st_tensor *x, const wsync_st_tensor *y)
{
    if (!x || !y) return x == y;
    return x->end - x->begin == y->end - y->begin && x->dtype == y->dtype &&
           (x->end == x->begin || memcmp(x->data, y->data, (size_t)(x->end - x->begin)) == 0);
}

/* After the decode: an entry whose target shares an earlier entry's
   target's memory must be that entry byte for byte (the trainer's bytes
   were equal under both names before and after); it is then not verified
   or written again, only reported. A target sharing memory with one the
   delta changes must have an entry too. */
static wsync_result wsync__apply_aliases(wsync__app *A, wsync_error *err)
{
    const wsync_allocator *a = &A->o->allocator;
    size_t n = A->n_targets, i, *alias, *first, *entry;
    int any = 0;
    wsync_result r;
    if (n < 2) return WSYNC_OK;
    alias = (size_t *)wsync__alloc(a, 3 * n * sizeof *alias);
    if (!alias) return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "targets' memory map");
    first = alias + n;
    entry = first + n;
    if ((r = wsync__aliases(A->targets, n, a, alias, &any, err)) != WSYNC_OK || !any) goto done;
    for (i = 0; i < n; i++) first[i] = entry[i] = SIZE_MAX;
    for (i = 0; i < A->f->n_tensors && r == WSYNC_OK; i++) {
        wsync__patch *pt = &A->patches[i], *p0;
        size_t ti, g;
        if (!pt->target) continue;
        ti = (size_t)(pt->target - A->targets);
        g = alias[ti];
        entry[ti] = i;
        if (first[g] == SIZE_MAX) {
            first[g] = i;
            continue;
        }
        p0 = &A->patches[first[g]];
        if (!wsync__same_entry(pt->src, p0->src) || !wsync__same_entry(pt->vals, p0->vals))
            r = wsync__fail(err, WSYNC_ERR_LAYOUT, pt->src->key_offset, pt->target->name, strlen(pt->target->name),
                            "shares its memory with target '%.100s' (tied), but the delta changes the two "
                            "differently: the chain does not hold equal bytes under both names",
                            p0->target->name);
        pt->alias_target = pt->target;
        pt->target = NULL;
    }
    for (i = 0; i < n && r == WSYNC_OK; i++)
        if (entry[i] == SIZE_MAX && first[alias[i]] != SIZE_MAX) {
            const wsync_tensor *o = A->patches[first[alias[i]]].target;
            r = wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, A->targets[i].name, strlen(A->targets[i].name),
                            "shares its memory with target '%.100s' (tied), which the delta changes, but the "
                            "delta does not change it: the chain does not hold equal bytes under both names",
                            o->name);
        }
done:
    wsync__free(a, alias);
    return r;
}

/* wsync_delta_apply's phase 2: either the digests of base and result (which
   decode, and so check, every Rice block into scratch), or a check of the
   Rice blocks alone; either way before anything is written. */
static wsync_result wsync__apply_phase_check(wsync__app *A, unsigned threads, wsync_error *err)
{
    size_t i;
    unsigned t;
    wsync_result r;
    if (!A->packed || (A->o->flags & (WSYNC_DELTA_SKIP_BASE_DIGEST | WSYNC_DELTA_SKIP_RESULT_DIGEST)) ==
                         (WSYNC_DELTA_SKIP_BASE_DIGEST | WSYNC_DELTA_SKIP_RESULT_DIGEST)) {
        if ((r = wsync__workers_do(threads, A->n_items, wsync__apply_check, A, err)) != WSYNC_OK) return r;
        {
            /* each Rice patch's items together must hold its declared count */
            size_t j = 0;
            while (j < A->n_items) {
                const wsync__patch *pt = &A->patches[A->items[j].patch];
                uint64_t total = 0;
                size_t start = j;
                while (j < A->n_items && A->items[j].patch == A->items[start].patch) total += A->items[j++].count;
                if (pt->rice && total != pt->count) {
                    return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, pt->src->key_offset, pt->src->name,
                                    pt->src->name_len, "blocks hold %llu changes, the header says %llu",
                                    (unsigned long long)total, (unsigned long long)pt->count);
                }
            }
        }
    } else {
        /* scratch for the largest Rice block (or 1 MiB for packed-max) */
        for (i = 0; i < A->f->n_tensors; i++) {
            const wsync__patch *pt = &A->patches[i];
            if (pt->rice && pt->nblocks) {
                uint64_t need = (pt->blk < pt->nelem ? pt->blk : pt->nelem) * pt->w;
                if (need > A->scratch_bytes) A->scratch_bytes = (size_t)need;
            }
        }
        for (t = 0; t < threads; t++) {
            A->scratch[t] = (uint8_t *)wsync__alloc(&A->o->allocator, A->scratch_bytes);
            if (!A->scratch[t]) {
                return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "digest scratch");
            }
        }
        if ((r = wsync__workers_do(threads, A->f->n_tensors, wsync__apply_verify, A, err)) != WSYNC_OK) return r;
    }
    return WSYNC_OK;
}

/* wsync_delta_apply, before phase 3: the report's buffers (on_changes),
   and the capture of the decoded changes; once the write starts, nothing
   may fail. */
static wsync_result wsync__apply_phase_report_prep(wsync__app *A, unsigned threads, wsync_error *err)
{
    size_t i;
    unsigned t;
    if (A->o->on_changes) {
        unsigned rt = (A->o->flags & WSYNC_DELTA_CHANGES_PARALLEL) ? threads : 1;
        if (A->chunk > ((size_t)SIZE_MAX >> 5)) A->chunk = (size_t)SIZE_MAX >> 5;
        A->rep = (uint8_t **)wsync__alloc(&A->o->allocator, rt * sizeof *A->rep);
        if (A->rep) memset(A->rep, 0, rt * sizeof *A->rep);
        for (t = 0; A->rep && t < rt; t++)
            if (!(A->rep[t] = (uint8_t *)wsync__alloc(&A->o->allocator, A->chunk * 16))) break;
        if (!A->rep || t < rt) {
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "changes buffer");
        }
        if (rt > 1 && A->f->n_tensors > 1) {
            wsync__rep_ord *ord = (wsync__rep_ord *)wsync__alloc(&A->o->allocator, A->f->n_tensors * sizeof *ord);
            if (!ord || !(A->order = (size_t *)wsync__alloc(&A->o->allocator, A->f->n_tensors * sizeof *A->order))) {
                wsync__free(&A->o->allocator, ord);
                return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "changes order");
            }
            for (i = 0; i < A->f->n_tensors; i++) {
                ord[i].count = A->patches[i].target || A->patches[i].alias_target ? A->patches[i].count : 0;
                ord[i].i = i;
            }
            qsort(ord, A->f->n_tensors, sizeof *ord, wsync__rep_ord_cmp);
            for (i = 0; i < A->f->n_tensors; i++) A->order[i] = ord[i].i;
            wsync__free(&A->o->allocator, ord);
        }
        if (!(A->item0 = (size_t *)wsync__alloc(&A->o->allocator, (A->f->n_tensors + 1) * sizeof *A->item0))) {
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "changes items");
        }
        {
            /* each entry's items; then the capture, item by item while it
               fits (its count from the blocks' headers), in one block that
               may be refused: then everything is decoded again */
            size_t j = 0;
            uint64_t total = 0;
            for (i = 0; i < A->f->n_tensors; i++) {
                A->item0[i] = j;
                while (j < A->n_items && A->items[j].patch == i) j++;
            }
            A->item0[A->f->n_tensors] = j;
            for (j = 0; j < A->n_items; j++) {
                wsync__item *it = &A->items[j];
                const wsync__patch *pt = &A->patches[it->patch];
                uint64_t bi, soff = it->soff, c = 0, need;
                if (!pt->rice || WSYNC_CHANGES_WHOLE(pt->count, pt->nelem, pt->w)) continue;
                for (bi = it->b0; bi < it->b1; bi++) {
                    uint32_t bsize = wsync__get_le32(pt->stream + pt->table_at + 4 * bi);
                    uint64_t v = 0;
                    if (bsize) wsync__varint_get(pt->stream + soff, bsize, &v);
                    c += v;
                    soff += bsize;
                }
                need = (c * (4 + (uint64_t)pt->w) + 7) & ~(uint64_t)7;
                if (need > WSYNC__CAPTURE_MAX - total) break;
                it->cap_n = c;
                total += need;
            }
            if (total && (A->cap = (uint8_t *)wsync__alloc(&A->o->allocator, (size_t)total)) != NULL) {
                uint8_t *q = A->cap;
                for (j = 0; j < A->n_items; j++) {
                    wsync__item *it = &A->items[j];
                    unsigned w = A->patches[it->patch].w;
                    if (!it->cap_n) continue;
                    it->cap_pos = (uint32_t *)(void *)q;
                    it->cap_val = q + it->cap_n * 4;
                    q += (it->cap_n * (4 + (uint64_t)w) + 7) & ~(uint64_t)7;
                }
            }
        }
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_delta_apply(const void *delta, uint64_t size, wsync_tensor *targets, size_t n,
                                         const wsync_delta_options *opt, wsync_delta_stats *stats,
                                         wsync_error *err)
{
    wsync_delta_options o;
    wsync_st_file f;
    wsync__app A;
    size_t i;
    unsigned threads, t;
    wsync_result r;
    wsync_delta_stats st;

    wsync__error_reset(err);
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (n && !targets)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "targets missing");
    for (i = 0; i < n; i++)
        if (!targets[i].name || (targets[i].rank && !targets[i].shape))
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                               "target %llu lacks a name or shape", (unsigned long long)i);
    memset(&A, 0, sizeof A);
    if ((r = wsync__open_delta(delta, size, &o.allocator, &f, &A.enc, err)) != WSYNC_OK) return r;
    /* entries are matched to targets by name with its length, but a name
       holding U+0000 would still be one no target can have */
    if ((r = wsync_st_check_names(&f, err)) != WSYNC_OK) {
        wsync_st_free(&f);
        return r;
    }
    memset(&st, 0, sizeof st);
    wsync__stats_from_meta(&f, A.enc, &st);
    st.bytes = size;
    A.f = &f;
    A.o = &o;
    A.n_targets = n;
    A.targets = targets;
    A.chunk = o.changes_chunk ? o.changes_chunk : 65536;
    A.packed = A.enc == WSYNC_ENCODING_PACKED || A.enc == WSYNC_ENCODING_PACKED_MAX;
    A.scratch_bytes = (size_t)1 << 20;
    threads = wsync__threads(o.threads);

    A.sorted = (wsync_tensor **)wsync__alloc(&o.allocator, (n + 1) * sizeof *A.sorted);
    A.patches = (wsync__patch *)wsync__alloc(&o.allocator, (f.n_tensors + 1) * sizeof *A.patches);
    A.scratch = (uint8_t **)wsync__alloc(&o.allocator, threads * sizeof *A.scratch);
    A.pmx = (wsync__pmx *)wsync__alloc(&o.allocator, threads * sizeof *A.pmx);
    if (A.scratch) memset(A.scratch, 0, threads * sizeof *A.scratch);
    if (A.pmx) memset(A.pmx, 0, threads * sizeof *A.pmx);
    if (A.patches) memset(A.patches, 0, (f.n_tensors + 1) * sizeof *A.patches);
    if (!A.sorted || !A.patches || !A.scratch || !A.pmx) {
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "apply index");
        goto done;
    }
    for (i = 0; i < n; i++) A.sorted[i] = &targets[i];
    qsort(A.sorted, n, sizeof *A.sorted, wsync__cmp_tensor_ptr_names);
    for (i = 1; i < n; i++)
        if (strcmp(A.sorted[i - 1]->name, A.sorted[i]->name) == 0) {
            r = wsync__fail(err, WSYNC_ERR_DUPLICATE_KEY, UINT64_MAX, A.sorted[i]->name,
                            strlen(A.sorted[i]->name), "%s", "two targets have this name");
            goto done;
        }

    /* 1. Parse every entry (and decode packed-max and trl ones, checking them). */
    r = wsync__workers_do(threads, f.n_tensors, wsync__apply_decode, &A, err);
    for (t = 0; t < threads; t++) wsync__pmx_free(&A.pmx[t], &o.allocator); /* the decode phase's alone */
    if (r != WSYNC_OK) goto done;
    if ((r = wsync__apply_aliases(&A, err)) != WSYNC_OK) goto done;
    if (!wsync__apply_items(&A, &o.allocator)) {
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "work items");
        goto done;
    }
    /* 2. Either the digests of base and result (which decode, and so check,
          every Rice block into scratch), or a check of the Rice blocks alone;
          either way before anything is written. */
    if ((r = wsync__apply_phase_check(&A, threads, err)) != WSYNC_OK) goto done;
    /* The report's buffers, before the write: once it starts, nothing may fail. */
    if ((r = wsync__apply_phase_report_prep(&A, threads, err)) != WSYNC_OK) goto done;
    /* 3. Write. Nothing below can fail. */
    wsync__workers_do(threads, A.n_items, wsync__apply_write, &A, NULL);
    for (i = 0; i < f.n_tensors; i++) {
        if (!A.patches[i].target && !A.patches[i].alias_target) continue;
        st.tensors++;
        st.elements += A.patches[i].nelem;
        st.changed += A.patches[i].count;
        if (A.patches[i].count) st.changed_tensors++;
    }
    if (!A.packed) {
        const char *te = wsync_st_metadata_get(&f, "total_elements");
        if (te) st.elements = strtoull(te, NULL, 10);
    }
    /* 4. Every write done: the changes to on_changes (all validated before
          phase 3; only the callback can stop this, with WSYNC_ERR_SINK). */
    if (o.on_changes) {
        r = wsync__workers_do((o.flags & WSYNC_DELTA_CHANGES_PARALLEL) ? threads : 1, f.n_tensors,
                              wsync__apply_report, &A, err);
        if (r != WSYNC_OK && stats) *stats = st;
    }
done:
    if (A.patches)
        for (i = 0; i < f.n_tensors; i++) {
            wsync__free(&o.allocator, A.patches[i].list);
        }
    if (A.scratch)
        for (t = 0; t < threads; t++) wsync__free(&o.allocator, A.scratch[t]);
    if (A.pmx)
        for (t = 0; t < threads; t++) wsync__pmx_free(&A.pmx[t], &o.allocator);
    wsync__free(&o.allocator, A.pmx);
    wsync__free(&o.allocator, A.patches);
    wsync__free(&o.allocator, A.sorted);
    wsync__free(&o.allocator, A.scratch);
    wsync__free(&o.allocator, A.items);
    wsync__free(&o.allocator, A.order);
    wsync__free(&o.allocator, A.item0);
    wsync__free(&o.allocator, A.cap);
    if (A.rep) {
        for (t = 0; t < ((o.flags & WSYNC_DELTA_CHANGES_PARALLEL) ? threads : 1); t++)
            wsync__free(&o.allocator, A.rep[t]);
        wsync__free(&o.allocator, A.rep);
    }
    wsync_st_free(&f);
    if (stats && r == WSYNC_OK) *stats = st;
    return r;
}


#ifndef WSYNC_NO_CHAIN
/* ======================================================================
   Store: the object-store interface and two stores  >>store
   ====================================================================== */

#define WSYNC__TMP_MARK WSYNC_STORE_TMP_MARK

WSYNC_DEF wsync_result wsync_store_key_check(const char *key, wsync_error *err)
{
    const char *seg, *p;
    if (!key || !*key)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "empty store key");
    if (strlen(key) > 1024)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "store key over 1024 bytes");
    if (strstr(key, WSYNC__TMP_MARK))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           "store key '%s' contains the reserved '" WSYNC__TMP_MARK "'", key);
    if (key[0] == '/')
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "store key '%s' starts with '/'", key);
    for (seg = key;; seg = p + 1) {
        size_t n;
        p = strchr(seg, '/');
        n = p ? (size_t)(p - seg) : strlen(seg);
        if (n == 0)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                               "store key '%s' has an empty segment ('//' or a trailing '/')", key);
        if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                               "store key '%s' has a '.' or '..' segment", key);
        if (!p) break;
    }
    for (p = key; *p; p++)
        if (*p == '\\' || (unsigned char)*p < 0x20)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                               "store key has a backslash or a control character");
    return WSYNC_OK;
}

WSYNC_DEF void wsync_store_close(wsync_store *s)
{
    if (s && s->close) s->close(s->user);
    if (s) memset(s, 0, sizeof *s);
}

/* len bytes appended: 1, or 0 (out of memory, nothing appended). */
static int wsync__buf_put(wsync__buf *b, const void *bytes, size_t len)
{
    if (!wsync__buf_reserve(b, len)) return 0;
    memcpy(b->p + b->len, bytes, len);
    b->len += len;
    return 1;
}

/* The end of wsync_store_get_all and _capped: what the read r gathered in
   b handed over (an empty object still gets a pointer), or freed. */
static wsync_result wsync__get_done(wsync__buf *b, wsync_result r, uint8_t **bytes, uint64_t *size, wsync_error *err)
{
    if (r != WSYNC_OK) {
        wsync__buf_free(b);
        return r;
    }
    if (!b->p && !wsync__buf_reserve(b, 1))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "empty object");
    *bytes = b->p;
    *size = b->len;
    return WSYNC_OK;
}

typedef struct wsync__getall {
    wsync__buf b;
} wsync__getall;

static int wsync__getall_sink(void *user, const void *bytes, size_t len)
{
    wsync__getall *g = (wsync__getall *)user;
    return wsync__buf_put(&g->b, bytes, len) ? 0 : -1;
}

WSYNC_DEF wsync_result wsync_store_get_all(const wsync_store *s, const char *key, const wsync_allocator *a,
                                           uint8_t **bytes, uint64_t *size, wsync_error *err)
{
    wsync__getall g;
    wsync_result r;
    uint64_t total = 0;
    wsync__error_reset(err);
    if (!s || !s->get || !bytes || !size)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_store_get_all arguments");
    *bytes = NULL;
    *size = 0;
    memset(&g, 0, sizeof g);
    g.b.a = a;
    if (s->head && s->head(s->user, key, &total, err) == WSYNC_OK && total && total <= (uint64_t)SIZE_MAX / 2 &&
        !wsync__buf_reserve(&g.b, (size_t)total))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%llu bytes for '%s'",
                           (unsigned long long)total, key);
    r = s->get(s->user, key, 0, UINT64_MAX, wsync__getall_sink, &g, &total, err);
    return wsync__get_done(&g.b, r, bytes, size, err);
}

typedef struct wsync__getcap {
    wsync__buf b;
    uint64_t max;
    int over;
} wsync__getcap;

static int wsync__getcap_sink(void *user, const void *bytes, size_t len)
{
    wsync__getcap *g = (wsync__getcap *)user;
    if (len > g->max - g->b.len) {
        g->over = 1;
        return 1; /* the store stops reading here */
    }
    return wsync__buf_put(&g->b, bytes, len) ? 0 : -1;
}

WSYNC_DEF wsync_result wsync_store_get_capped(const wsync_store *s, const char *key, uint64_t max_bytes,
                                              unsigned flags, const wsync_allocator *a, uint8_t **bytes,
                                              uint64_t *size, wsync_error *err)
{
    wsync__getcap g;
    wsync_result r;
    uint64_t total = UINT64_MAX;
    int exact = (flags & WSYNC_STORE_GET_EXACT) != 0;
    wsync__error_reset(err);
    if (!s || !s->get || !bytes || !size || !key)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_store_get_capped arguments");
    *bytes = NULL;
    *size = 0;
    memset(&g, 0, sizeof g);
    g.b.a = a;
    g.max = max_bytes > (uint64_t)SIZE_MAX / 2 ? (uint64_t)SIZE_MAX / 2 : max_bytes;
    if (exact && g.max && !wsync__buf_reserve(&g.b, (size_t)g.max))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%llu bytes for '%s'",
                           (unsigned long long)g.max, key);
    r = s->get(s->user, key, 0, exact ? g.max : UINT64_MAX, wsync__getcap_sink, &g, &total, err);
    if (exact && r == WSYNC_ERR_OUT_OF_BOUNDS && total < g.max) {
        /* shorter than expected: read what there is (capped all the same) */
        g.b.len = 0;
        g.over = 0;
        wsync__error_reset(err);
        r = s->get(s->user, key, 0, UINT64_MAX, wsync__getcap_sink, &g, &total, err);
    }
    if (g.over || (r == WSYNC_OK && total != UINT64_MAX && total > g.max)) {
        wsync__buf_free(&g.b);
        if (total != UINT64_MAX && total > g.max)
            return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0,
                               "'%s' is %llu bytes, more than the %llu expected (read no further)", key,
                               (unsigned long long)total, (unsigned long long)max_bytes);
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0,
                           "'%s' is longer than the %llu bytes expected: the store sent more (read no further)",
                           key, (unsigned long long)max_bytes);
    }
    return wsync__get_done(&g.b, r, bytes, size, err);
}

/* ---- memory store >>store-mem ---- */

typedef struct wsync__mobj {
    char *key;
    uint8_t *bytes;
    size_t len;
} wsync__mobj;

typedef struct wsync__memstore {
    wsync_allocator a;
    wsync__mobj *objs; /* sorted by key */
    size_t n, cap;
#if WSYNC__HAVE_THREADS
    pthread_mutex_t mu;
#endif
} wsync__memstore;


/* Index of key, or of where it would go (*found 0). */
static size_t wsync__mem_find(const wsync__memstore *m, const char *key, int *found)
{
    size_t lo = 0, hi = m->n;
    *found = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->objs[mid].key, key);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static wsync_result wsync__mem_put(void *user, const char *key, const void *bytes, size_t len, wsync_error *err)
{
    wsync__memstore *m = (wsync__memstore *)user;
    uint8_t *copy;
    char *kcopy = NULL;
    size_t at;
    int found;
    wsync_result r;
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!bytes && len) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no bytes");
    copy = (uint8_t *)wsync__alloc(&m->a, len);
    if (!copy) return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "object copy");
    if (len) memcpy(copy, bytes, len);
    WSYNC__LOCK(&m->mu);
    at = wsync__mem_find(m, key, &found);
    if (found) {
        /* the swap is the atomic step */
        uint8_t *old = m->objs[at].bytes;
        m->objs[at].bytes = copy;
        m->objs[at].len = len;
        WSYNC__UNLOCK(&m->mu);
        wsync__free(&m->a, old);
        return WSYNC_OK;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        wsync__mobj *no = (wsync__mobj *)wsync__alloc(&m->a, cap * sizeof *no);
        if (!no) goto oom;
        if (m->n) memcpy(no, m->objs, m->n * sizeof *no);
        wsync__free(&m->a, m->objs);
        m->objs = no;
        m->cap = cap;
    }
    kcopy = (char *)wsync__alloc(&m->a, strlen(key) + 1);
    if (!kcopy) goto oom;
    strcpy(kcopy, key);
    memmove(m->objs + at + 1, m->objs + at, (m->n - at) * sizeof *m->objs);
    m->objs[at].key = kcopy;
    m->objs[at].bytes = copy;
    m->objs[at].len = len;
    m->n++;
    WSYNC__UNLOCK(&m->mu);
    return WSYNC_OK;
oom:
    WSYNC__UNLOCK(&m->mu);
    wsync__free(&m->a, copy);
    return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "store index");
}

static wsync_result wsync__range_check(const char *key, uint64_t size, uint64_t offset, uint64_t *len,
                                       wsync_error *err)
{
    if (offset > size)
        return wsync__fail(err, WSYNC_ERR_OUT_OF_BOUNDS, UINT64_MAX, NULL, 0,
                           "offset %llu is past the end of '%s' (%llu bytes)", (unsigned long long)offset, key,
                           (unsigned long long)size);
    if (*len == UINT64_MAX) *len = size - offset;
    if (*len > size - offset)
        return wsync__fail(err, WSYNC_ERR_OUT_OF_BOUNDS, UINT64_MAX, NULL, 0,
                           "bytes [%llu, +%llu) run past the end of '%s' (%llu bytes)", (unsigned long long)offset,
                           (unsigned long long)*len, key, (unsigned long long)size);
    return WSYNC_OK;
}

static wsync_result wsync__mem_get(void *user, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                                   void *sink_user, uint64_t *size, wsync_error *err)
{
    wsync__memstore *m = (wsync__memstore *)user;
    size_t at;
    int found, rc = 0;
    wsync_result r;
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    WSYNC__LOCK(&m->mu);
    at = wsync__mem_find(m, key, &found);
    if (!found) {
        WSYNC__UNLOCK(&m->mu);
        return wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "no object '%s'", key);
    }
    if (size) *size = m->objs[at].len;
    r = wsync__range_check(key, m->objs[at].len, offset, &len, err);
    if (r == WSYNC_OK && len) rc = sink(sink_user, m->objs[at].bytes + offset, (size_t)len);
    WSYNC__UNLOCK(&m->mu);
    if (r == WSYNC_OK && rc != 0)
        r = wsync__fail(err, WSYNC_ERR_SINK, UINT64_MAX, NULL, 0, "the sink failed (%d) reading '%s'", rc, key);
    return r;
}

static wsync_result wsync__mem_head(void *user, const char *key, uint64_t *size, wsync_error *err)
{
    wsync__memstore *m = (wsync__memstore *)user;
    size_t at;
    int found;
    wsync_result r;
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    WSYNC__LOCK(&m->mu);
    at = wsync__mem_find(m, key, &found);
    if (found && size) *size = m->objs[at].len;
    WSYNC__UNLOCK(&m->mu);
    return found ? WSYNC_OK : wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "no object '%s'", key);
}

static wsync_result wsync__mem_list(void *user, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    wsync__memstore *m = (wsync__memstore *)user;
    size_t i, plen = prefix ? strlen(prefix) : 0;
    int found;
    (void)err;
    WSYNC__LOCK(&m->mu);
    /* callbacks run under the lock: they must not call back into this store */
    for (i = wsync__mem_find(m, prefix ? prefix : "", &found); i < m->n; i++) {
        if (strncmp(m->objs[i].key, prefix ? prefix : "", plen) != 0) break;
        if (fn(fn_user, m->objs[i].key, m->objs[i].len) != 0) break;
    }
    WSYNC__UNLOCK(&m->mu);
    return WSYNC_OK;
}

static wsync_result wsync__mem_del(void *user, const char *key, wsync_error *err)
{
    wsync__memstore *m = (wsync__memstore *)user;
    size_t at;
    int found;
    wsync__mobj o;
    wsync_result r;
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    WSYNC__LOCK(&m->mu);
    at = wsync__mem_find(m, key, &found);
    if (!found) {
        WSYNC__UNLOCK(&m->mu);
        return wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "no object '%s'", key);
    }
    o = m->objs[at];
    memmove(m->objs + at, m->objs + at + 1, (m->n - at - 1) * sizeof *m->objs);
    m->n--;
    WSYNC__UNLOCK(&m->mu);
    wsync__free(&m->a, o.key);
    wsync__free(&m->a, o.bytes);
    return WSYNC_OK;
}

static void wsync__mem_close(void *user)
{
    wsync__memstore *m = (wsync__memstore *)user;
    size_t i;
    wsync_allocator a;
    if (!m) return;
    for (i = 0; i < m->n; i++) {
        wsync__free(&m->a, m->objs[i].key);
        wsync__free(&m->a, m->objs[i].bytes);
    }
    wsync__free(&m->a, m->objs);
#if WSYNC__HAVE_THREADS
    pthread_mutex_destroy(&m->mu);
#endif
    a = m->a;
    wsync__free(&a, m);
}

WSYNC_DEF wsync_result wsync_store_mem_open(const wsync_store_options *opt, wsync_store *out, wsync_error *err)
{
    wsync__memstore *m;
    wsync_allocator a;
    wsync__error_reset(err);
    if (!out) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no output");
    memset(out, 0, sizeof *out);
    memset(&a, 0, sizeof a);
    if (opt) a = opt->allocator;
    m = (wsync__memstore *)wsync__alloc(&a, sizeof *m);
    if (!m) return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "memory store");
    memset(m, 0, sizeof *m);
    m->a = a;
#if WSYNC__HAVE_THREADS
    pthread_mutex_init(&m->mu, NULL);
#endif
    out->user = m;
    out->put = wsync__mem_put;
    out->get = wsync__mem_get;
    out->head = wsync__mem_head;
    out->list = wsync__mem_list;
    out->del = wsync__mem_del;
    out->close = wsync__mem_close;
    return WSYNC_OK;
}

/* ---- directory store >>store-dir ---- */

#if WSYNC__POSIX

typedef struct wsync__dirstore {
    wsync_allocator a;
    char *root;
    size_t root_len;
    int no_fsync;
    int no_create;     /* WSYNC_STORE_NO_CREATE: a missing root is WSYNC_ERR_NO_STORE */
    unsigned long counter;
#if WSYNC__HAVE_THREADS
    pthread_mutex_t mu;
#endif
} wsync__dirstore;

/* root + "/" + key (+ suffix), from the store's allocator. */
static char *wsync__dir_path(const wsync__dirstore *d, const char *key, const char *suffix)
{
    size_t kl = strlen(key), sl = suffix ? strlen(suffix) : 0;
    char *p = (char *)wsync__alloc(&d->a, d->root_len + 1 + kl + sl + 1);
    if (!p) return NULL;
    memcpy(p, d->root, d->root_len);
    p[d->root_len] = '/';
    memcpy(p + d->root_len + 1, key, kl);
    if (sl) memcpy(p + d->root_len + 1 + kl, suffix, sl);
    p[d->root_len + 1 + kl + sl] = 0;
    return p;
}

/* An I/O failure named with errno's text; a missing file is NOT_FOUND where
   the caller asked about an object, IO everywhere else. */
static wsync_result wsync__io_fail(wsync_error *err, const char *what, const char *path, int missing_is_not_found)
{
    int e = errno;
    wsync_result r = e == ENOENT && missing_is_not_found ? WSYNC_ERR_NOT_FOUND : WSYNC_ERR_IO;
    return wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s '%s': %s", what, path, strerror(e));
}

/* Creates the directories above `path` that do not exist (from root on). */
static int wsync__mkdirs(char *path, size_t from)
{
    size_t i;
    for (i = from; path[i]; i++) {
        if (path[i] != '/') continue;
        path[i] = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            path[i] = '/';
            return 0;
        }
        path[i] = '/';
    }
    return 1;
}

static int wsync__fsync_dir_of(char *path)
{
    char *slash = strrchr(path, '/');
    int fd, ok;
    if (!slash) return 1;
    *slash = 0;
    fd = open(path, O_RDONLY);
    *slash = '/';
    if (fd < 0) return 0;
    ok = fsync(fd) == 0;
    close(fd);
    return ok;
}

static wsync_result wsync__dir_put(void *user, const char *key, const void *bytes, size_t len, wsync_error *err)
{
    wsync__dirstore *d = (wsync__dirstore *)user;
    char suffix[64], *path = NULL, *tmp = NULL;
    const uint8_t *p = (const uint8_t *)bytes;
    size_t done = 0;
    unsigned long n;
    int fd = -1;
    wsync_result r;
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!bytes && len) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no bytes");
#if WSYNC__HAVE_THREADS
    pthread_mutex_lock(&d->mu);
#endif
    n = ++d->counter;
#if WSYNC__HAVE_THREADS
    pthread_mutex_unlock(&d->mu);
#endif
    snprintf(suffix, sizeof suffix, WSYNC__TMP_MARK "%ld.%lu", (long)getpid(), n);
    path = wsync__dir_path(d, key, NULL);
    tmp = wsync__dir_path(d, key, suffix);
    if (!path || !tmp) {
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "path");
        goto done;
    }
    if (!wsync__mkdirs(tmp, d->root_len + 1)) {
        r = wsync__io_fail(err, "cannot create the directories for", path, 0);
        goto done;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC, 0644);
    if (fd < 0) {
        r = wsync__io_fail(err, "cannot create", tmp, 0);
        goto done;
    }
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done > ((size_t)1 << 30) ? ((size_t)1 << 30) : len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            r = wsync__io_fail(err, "cannot write", tmp, 0);
            goto done;
        }
        done += (size_t)w;
    }
    if (!d->no_fsync && fsync(fd) != 0) {
        r = wsync__io_fail(err, "cannot fsync", tmp, 0);
        goto done;
    }
    if (close(fd) != 0) {
        fd = -1;
        r = wsync__io_fail(err, "cannot close", tmp, 0);
        goto done;
    }
    fd = -1;
    /* the atomic step: readers see the old object or the new one */
    if (rename(tmp, path) != 0) {
        r = wsync__io_fail(err, "cannot rename into place", path, 0);
        goto done;
    }
    if (!d->no_fsync && !wsync__fsync_dir_of(path)) {
        r = wsync__io_fail(err, "cannot fsync the directory of", path, 0);
    }
done:
    if (fd >= 0) close(fd);
    if (r != WSYNC_OK && tmp) unlink(tmp);
    wsync__free(&d->a, path);
    wsync__free(&d->a, tmp);
    return r;
}

/* What get and head say alike of a key whose path is no regular file: a
   folder is no object (NOT_FOUND, as HTTP and S3 servers answer); a FIFO or
   a device where an object should be is refused unread (IO). */
static wsync_result wsync__dir_not_object(wsync_error *err, const char *key, const char *path, mode_t mode)
{
    if (S_ISDIR(mode))
        return wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "no object '%s': '%s' is a folder, not an "
                           "object", key, path);
    return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "'%s' is not a regular file (a FIFO or a device where "
                       "an object should be): refused unread", path);
}

static wsync_result wsync__dir_get(void *user, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                                   void *sink_user, uint64_t *size, wsync_error *err)
{
    wsync__dirstore *d = (wsync__dirstore *)user;
    char *path;
    int fd;
    struct stat st;
    wsync_result r;
    uint8_t buf[65536];
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!(path = wsync__dir_path(d, key, NULL)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "path");
    /* O_NONBLOCK: a FIFO (or a device) put where an object should be must
       not block the open forever; it is refused below, never read */
    fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        r = wsync__io_fail(err, "cannot open", path, 1);
        wsync__free(&d->a, path);
        return r;
    }
    /* one open file: the object read is the one that was in place when it
       was opened, whatever is renamed over it meanwhile */
    if (fstat(fd, &st) != 0) {
        r = wsync__io_fail(err, "cannot stat", path, 0);
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        r = wsync__dir_not_object(err, key, path, st.st_mode);
        goto done;
    }
    {
        int fl = fcntl(fd, F_GETFL);
        if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    if (size) *size = (uint64_t)st.st_size;
    if ((r = wsync__range_check(key, (uint64_t)st.st_size, offset, &len, err)) != WSYNC_OK) goto done;
    if (len && lseek(fd, (off_t)offset, SEEK_SET) == (off_t)-1) {
        r = wsync__io_fail(err, "cannot seek in", path, 0);
        goto done;
    }
    while (len) {
        ssize_t n = read(fd, buf, len < sizeof buf ? (size_t)len : sizeof buf);
        int rc;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            r = n < 0 ? wsync__io_fail(err, "cannot read", path, 0)
                      : wsync__fail(err, WSYNC_ERR_TRUNCATED, UINT64_MAX, NULL, 0, "'%s' shrank while being read", path);
            goto done;
        }
        if ((rc = sink(sink_user, buf, (size_t)n)) != 0) {
            r = wsync__fail(err, WSYNC_ERR_SINK, UINT64_MAX, NULL, 0, "the sink failed (%d) reading '%s'", rc, key);
            goto done;
        }
        len -= (uint64_t)n;
    }
done:
    close(fd);
    wsync__free(&d->a, path);
    return r;
}

static wsync_result wsync__dir_head(void *user, const char *key, uint64_t *size, wsync_error *err)
{
    wsync__dirstore *d = (wsync__dirstore *)user;
    char *path;
    struct stat st;
    wsync_result r = WSYNC_OK;
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!(path = wsync__dir_path(d, key, NULL)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "path");
    if (stat(path, &st) != 0) r = wsync__io_fail(err, "cannot stat", path, 1);
    else if (!S_ISREG(st.st_mode)) r = wsync__dir_not_object(err, key, path, st.st_mode);
    else if (size) *size = (uint64_t)st.st_size;
    wsync__free(&d->a, path);
    return r;
}

/* Keys found under a directory, gathered then sorted, so the listing is in
   byte order whatever readdir returns. */
typedef struct wsync__keyent {
    char *key;
    uint64_t size;
} wsync__keyent;

typedef struct wsync__keylist {
    wsync__keyent *e;
    size_t n, cap;
    const wsync_allocator *a;
    int oom;
} wsync__keylist;

static void wsync__keylist_add(wsync__keylist *l, const char *key, size_t klen, uint64_t size)
{
    char *k;
    if (l->oom) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        wsync__keyent *ne = (wsync__keyent *)wsync__alloc(l->a, cap * sizeof *ne);
        if (!ne) {
            l->oom = 1;
            return;
        }
        if (l->n) memcpy(ne, l->e, l->n * sizeof *ne);
        wsync__free(l->a, l->e);
        l->e = ne;
        l->cap = cap;
    }
    if (!(k = (char *)wsync__alloc(l->a, klen + 1))) {
        l->oom = 1;
        return;
    }
    memcpy(k, key, klen);
    k[klen] = 0;
    l->e[l->n].key = k;
    l->e[l->n].size = size;
    l->n++;
}

/* Whether a directory entry is a symbolic link: lstat where the headers
   declare it; glibc under strict -std=c99 hides lstat, and there readdir's
   d_type says (a filesystem that leaves it unknown gets the loop check of
   wsync__dir_walk alone). */
static int wsync__dir_is_link(const char *path, const struct dirent *e)
{
#if defined(__GLIBC__) && !defined(__USE_XOPEN_EXTENDED) && !defined(__USE_XOPEN2K)
    (void)path;
    return e->d_type == 10; /* DT_LNK, hidden there too */
#else
    struct stat st;
    (void)e;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
#endif
}

/* The directories being walked, innermost first: one is never entered
   twice on the way down (a loop through a link or a bind mount). */
typedef struct wsync__dir_up {
    dev_t dev;
    ino_t ino;
    const struct wsync__dir_up *up;
} wsync__dir_up;

/* Walks path (plen bytes, inside a buffer of cap) depth first. rest is
   what remains of the prefix: while it holds a '/', only the directory
   named by its first segment is entered; then only the entries that begin
   with it are taken, and everything under them. A link is listed when it
   leads to a regular file and never entered when it leads to a directory,
   so links can neither loop nor take the walk out of the store. */
static int wsync__dir_walk(wsync__dirstore *d, char *path, size_t plen, size_t cap, wsync__keylist *l,
                           const char *rest, const wsync__dir_up *up, int depth)
{
    DIR *dir;
    struct dirent *e;
    const char *slash = strchr(rest, '/');
    size_t rlen = slash ? (size_t)(slash - rest) : strlen(rest);
    if (depth > 64) return 1;
    if (!(dir = opendir(path))) return errno == ENOENT || errno == ENOTDIR;
    while ((e = readdir(dir)) != NULL) {
        size_t n = strlen(e->d_name);
        struct stat st;
        const wsync__dir_up *u;
        wsync__dir_up here;
        if (e->d_name[0] == '.' && (n == 1 || (n == 2 && e->d_name[1] == '.'))) continue;
        if (strstr(e->d_name, WSYNC__TMP_MARK)) continue; /* a put in progress, or one that died */
        if (n < rlen || memcmp(e->d_name, rest, rlen) != 0 || (slash && n != rlen)) continue;
        if (plen + 1 + n + 1 > cap) continue;
        path[plen] = '/';
        memcpy(path + plen + 1, e->d_name, n + 1);
        if (stat(path, &st) == 0 && !(S_ISDIR(st.st_mode) && wsync__dir_is_link(path, e))) {
            if (S_ISDIR(st.st_mode)) {
                for (u = up; u && (u->dev != st.st_dev || u->ino != st.st_ino); u = u->up) {}
                here.dev = st.st_dev;
                here.ino = st.st_ino;
                here.up = up;
                if (!u) wsync__dir_walk(d, path, plen + 1 + n, cap, l, slash ? slash + 1 : "", &here, depth + 1);
            } else if (S_ISREG(st.st_mode) && !slash) {
                wsync__keylist_add(l, path + d->root_len + 1, plen + 1 + n - d->root_len - 1, (uint64_t)st.st_size);
            }
        }
        path[plen] = 0;
    }
    closedir(dir);
    return 1;
}

static int wsync__cmp_keyent(const void *a, const void *b)
{
    return strcmp(((const wsync__keyent *)a)->key, ((const wsync__keyent *)b)->key);
}

static wsync_result wsync__dir_list(void *user, const char *prefix, wsync_key_fn fn, void *fn_user, wsync_error *err)
{
    wsync__dirstore *d = (wsync__dirstore *)user;
    wsync__keylist l;
    size_t i, cap = d->root_len + 4096, plen = prefix ? strlen(prefix) : 0;
    char *path;
    struct stat st;
    wsync__dir_up root;
    wsync_result r = WSYNC_OK;
    memset(&l, 0, sizeof l);
    memset(&root, 0, sizeof root);
    l.a = &d->a;
    if (!(path = (char *)wsync__alloc(&d->a, cap)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "path");
    memcpy(path, d->root, d->root_len + 1);
    if (stat(path, &st) == 0) {
        root.dev = st.st_dev;
        root.ino = st.st_ino;
        root.up = NULL;
    }
    if (!wsync__dir_walk(d, path, d->root_len, cap, &l, prefix ? prefix : "", &root, 0))
        r = wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot list '%s': %s", d->root, strerror(errno));
    else if (l.oom)
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "key list");
    wsync__free(&d->a, path);
    if (r == WSYNC_OK) {
        if (l.n) qsort(l.e, l.n, sizeof *l.e, wsync__cmp_keyent);
        for (i = 0; i < l.n; i++) {
            if (plen && strncmp(l.e[i].key, prefix, plen) != 0) continue;
            if (fn(fn_user, l.e[i].key, l.e[i].size) != 0) break;
        }
    }
    for (i = 0; i < l.n; i++) wsync__free(&d->a, l.e[i].key);
    wsync__free(&d->a, l.e);
    return r;
}

static wsync_result wsync__dir_del(void *user, const char *key, wsync_error *err)
{
    wsync__dirstore *d = (wsync__dirstore *)user;
    char *path;
    wsync_result r = WSYNC_OK;
    if ((r = wsync_store_key_check(key, err)) != WSYNC_OK) return r;
    if (!(path = wsync__dir_path(d, key, NULL)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "path");
    if (unlink(path) != 0) r = wsync__io_fail(err, "cannot delete", path, 1);
    else if (!d->no_fsync) wsync__fsync_dir_of(path);
    wsync__free(&d->a, path);
    return r;
}

static void wsync__dir_close(void *user)
{
    wsync__dirstore *d = (wsync__dirstore *)user;
    wsync_allocator a;
    if (!d) return;
#if WSYNC__HAVE_THREADS
    pthread_mutex_destroy(&d->mu);
#endif
    a = d->a;
    wsync__free(&a, d->root);
    wsync__free(&a, d);
}

/* WSYNC_STORE_NO_CREATE: every call first checks that the root is there. */
static wsync_result wsync__dir_missing(const wsync__dirstore *d, wsync_error *err)
{
    struct stat st;
    if (stat(d->root, &st) == 0 && S_ISDIR(st.st_mode)) return WSYNC_OK;
    if (stat(d->root, &st) == 0)
        return wsync__fail(err, WSYNC_ERR_NO_STORE, UINT64_MAX, NULL, 0,
                           "the store '%s' is not a directory (a directory store is a directory)", d->root);
    return wsync__fail(err, WSYNC_ERR_NO_STORE, UINT64_MAX, NULL, 0,
                       "the store '%s' does not exist (yet): %s; nothing was created (a publisher creates it)",
                       d->root, strerror(errno));
}

static wsync_result wsync__dirnc_put(void *user, const char *key, const void *bytes, size_t len, wsync_error *err)
{
    wsync_result r = wsync__dir_missing((wsync__dirstore *)user, err);
    return r != WSYNC_OK ? r : wsync__dir_put(user, key, bytes, len, err);
}

static wsync_result wsync__dirnc_get(void *user, const char *key, uint64_t offset, uint64_t len, wsync_sink_fn sink,
                                     void *sink_user, uint64_t *size, wsync_error *err)
{
    wsync_result r = wsync__dir_missing((wsync__dirstore *)user, err);
    return r != WSYNC_OK ? r : wsync__dir_get(user, key, offset, len, sink, sink_user, size, err);
}

static wsync_result wsync__dirnc_head(void *user, const char *key, uint64_t *size, wsync_error *err)
{
    wsync_result r = wsync__dir_missing((wsync__dirstore *)user, err);
    return r != WSYNC_OK ? r : wsync__dir_head(user, key, size, err);
}

static wsync_result wsync__dirnc_list(void *user, const char *prefix, wsync_key_fn fn, void *fn_user,
                                      wsync_error *err)
{
    wsync_result r = wsync__dir_missing((wsync__dirstore *)user, err);
    return r != WSYNC_OK ? r : wsync__dir_list(user, prefix, fn, fn_user, err);
}

static wsync_result wsync__dirnc_del(void *user, const char *key, wsync_error *err)
{
    wsync_result r = wsync__dir_missing((wsync__dirstore *)user, err);
    return r != WSYNC_OK ? r : wsync__dir_del(user, key, err);
}

WSYNC_DEF wsync_result wsync_store_dir_open(const char *root, const wsync_store_options *opt, wsync_store *out,
                                            wsync_error *err)
{
    wsync__dirstore *d;
    wsync_allocator a;
    struct stat st;
    size_t n;
    wsync__error_reset(err);
    if (!out || !root || !*root)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "a root directory is needed");
    memset(out, 0, sizeof *out);
    memset(&a, 0, sizeof a);
    if (opt) a = opt->allocator;
    n = strlen(root);
    while (n > 1 && root[n - 1] == '/') n--;
    if (!(opt && (opt->flags & WSYNC_STORE_NO_CREATE))) {
        char *tmp = (char *)wsync__alloc(&a, n + 2);
        int ok;
        if (!tmp) return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "directory store");
        memcpy(tmp, root, n);
        tmp[n] = '/'; /* the root too, as the directories above a file in it */
        tmp[n + 1] = 0;
        ok = wsync__mkdirs(tmp, 1);
        wsync__free(&a, tmp);
        if (!ok)
            return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot create '%s': %s", root,
                               strerror(errno));
        if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
            return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "'%s' is not a directory", root);
    } else if (stat(root, &st) == 0 && !S_ISDIR(st.st_mode)) {
        return wsync__fail(err, WSYNC_ERR_NO_STORE, UINT64_MAX, NULL, 0,
                           "the store '%s' is not a directory (a directory store is a directory)", root);
    }
    d = (wsync__dirstore *)wsync__alloc(&a, sizeof *d);
    if (!d) return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "directory store");
    memset(d, 0, sizeof *d);
    d->a = a;
    d->root = (char *)wsync__alloc(&a, n + 1);
    if (!d->root) {
        wsync__free(&a, d);
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "directory store");
    }
    memcpy(d->root, root, n);
    d->root[n] = 0;
    d->root_len = n;
    d->no_fsync = opt ? opt->no_fsync : 0;
    d->no_create = opt && (opt->flags & WSYNC_STORE_NO_CREATE);
#if WSYNC__HAVE_THREADS
    pthread_mutex_init(&d->mu, NULL);
#endif
    out->user = d;
    out->put = d->no_create ? wsync__dirnc_put : wsync__dir_put;
    out->get = d->no_create ? wsync__dirnc_get : wsync__dir_get;
    out->head = d->no_create ? wsync__dirnc_head : wsync__dir_head;
    out->list = d->no_create ? wsync__dirnc_list : wsync__dir_list;
    out->del = d->no_create ? wsync__dirnc_del : wsync__dir_del;
    out->close = wsync__dir_close;
    return WSYNC_OK;
}
#else
WSYNC_DEF wsync_result wsync_store_dir_open(const char *root, const wsync_store_options *opt, wsync_store *out,
                                            wsync_error *err)
{
    (void)root;
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s",
                       "the directory store needs POSIX (this build has WSYNC_NO_MMAP or no POSIX)");
}
#endif


/* ---------------------------------------------------------------------
   Chain: HEAD, reading a chain, the state digest, publisher,
   subscriber, prefetch, mirror  >>chain
   --------------------------------------------------------------------- */

#define WSYNC__CHAIN_MAX_ENTRIES 1000000u
#define WSYNC__PREFIX_MAX 512
#define WSYNC__KEY_MAX (WSYNC__PREFIX_MAX + 64)
#define WSYNC__MAX_BAD 32

static double wsync__wall(void)
{
#if WSYNC__POSIX
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

static void wsync__entry_key(wsync_chain_entry *e)
{
    snprintf(e->key, sizeof e->key, "%s/step_%06llu.safetensors",
             e->kind == WSYNC_CHAIN_ANCHOR ? "anchors" : "deltas", (unsigned long long)e->step);
}

/* A directory anchor's key: the prefix of its objects. */
static void wsync__entry_dir_key(wsync_chain_entry *e)
{
    snprintf(e->key, sizeof e->key, "anchors/step_%06llu/", (unsigned long long)e->step);
}

/* "<prefix>/<rel>" or "<rel>"; 0 when it does not fit. */
static int wsync__chain_path(char *buf, size_t cap, const char *prefix, const char *rel)
{
    size_t pl = prefix ? strlen(prefix) : 0, rl = strlen(rel), need = pl + (pl ? 1 : 0) + rl + 1;
    if (need > cap) return 0;
    if (pl) {
        memcpy(buf, prefix, pl);
        buf[pl] = '/';
        memcpy(buf + pl + 1, rel, rl + 1);
    } else {
        memcpy(buf, rel, rl + 1);
    }
    return 1;
}

static wsync_result wsync__chain_prefix(char *dst, const char *prefix, wsync_error *err)
{
    size_t n = prefix ? strlen(prefix) : 0;
    wsync_result r;
    dst[0] = 0;
    if (!n) return WSYNC_OK;
    if (n >= WSYNC__PREFIX_MAX)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "chain prefix too long");
    if ((r = wsync_store_key_check(prefix, err)) != WSYNC_OK) return r;
    memcpy(dst, prefix, n + 1);
    return WSYNC_OK;
}

/* Puts "object 'key': " in front of err's message, keeping code and tensor. */
static wsync_result wsync__obj_fail(wsync_error *err, wsync_result r, const char *key)
{
    char m[sizeof err->message];
    size_t kl, ml, o = 0;
    if (!err) return r;
    err->code = r;
    kl = strlen(key);
    ml = strlen(err->message);
    if (kl > 200) kl = 200;
    memcpy(m, "object '", 8), o = 8;
    memcpy(m + o, key, kl), o += kl;
    memcpy(m + o, "': ", 3), o += 3;
    if (ml > sizeof m - 1 - o) ml = sizeof m - 1 - o;
    memcpy(m + o, err->message, ml), o += ml;
    m[o] = 0;
    memcpy(err->message, m, o + 1);
    wsync_error_clean(err->message);
    return r;
}

static int wsync__cmp_entry(const void *pa, const void *pb)
{
    const wsync_chain_entry *a = (const wsync_chain_entry *)pa, *b = (const wsync_chain_entry *)pb;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    return a->step < b->step ? -1 : a->step > b->step;
}

/* Index of the entry of `kind` at `step`, or -1 (entries sorted). */
static long wsync__chain_find(const wsync_chain_info *c, wsync_chain_kind kind, uint64_t step)
{
    size_t lo = 0, hi = c->n_entries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const wsync_chain_entry *e = &c->entries[mid];
        if (e->kind < kind || (e->kind == kind && e->step < step)) lo = mid + 1;
        else hi = mid;
    }
    if (lo < c->n_entries && c->entries[lo].kind == kind && c->entries[lo].step == step) return (long)lo;
    return -1;
}

WSYNC_DEF wsync_result wsync_chain_file_name_check(const char *name, wsync_error *err)
{
    size_t i, n = name ? strlen(name) : 0;
    if (!n || n >= WSYNC_CHAIN_FILE_NAME_MAX || name[0] == '.')
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, name, n, "file name '%.*s' %s", (int)(n > 200 ? 200 : n),
                           name ? name : "", !n ? "is empty" : name[0] == '.' ? "starts with '.'" : "is too long");
    for (i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, (uint64_t)i, name, n,
                               "file name '%.*s' holds a character other than A-Z a-z 0-9 . _ -", (int)n, name);
    }
    return WSYNC_OK;
}

static int wsync__cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The digest a directory anchor's entry carries: wsync64 of its files'
   digests, 8 bytes little-endian each, in order. */
static uint64_t wsync__files_digest(const wsync_chain_file *f, size_t n)
{
    wsync_digest_state ds;
    size_t i;
    wsync_digest_init(&ds);
    for (i = 0; i < n; i++) {
        uint8_t b[8];
        wsync__store_le64(b, f[i].digest);
        wsync_digest_update(&ds, b, 8);
    }
    return wsync_digest_final(&ds);
}

/* A directory anchor's objects: names valid and unique, shards first (at
   least one), the sizes and digests adding up to the entry's. */
static wsync_result wsync__files_validate(const wsync_chain_entry *e, wsync_error *err)
{
    size_t i, j;
    uint64_t total = 0;
    if (e->kind != WSYNC_CHAIN_ANCHOR || e->n_files > WSYNC_CHAIN_FILES_MAX || !e->files[0].tensors)
        return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "step %llu: %s", (unsigned long long)e->step,
                           e->kind != WSYNC_CHAIN_ANCHOR ? "only an anchor has files"
                           : e->n_files > WSYNC_CHAIN_FILES_MAX ? "more than WSYNC_CHAIN_FILES_MAX files"
                                                                : "its first file is not a shard (shards come first)");
    for (i = 0; i < e->n_files; i++) {
        const wsync_chain_file *f = &e->files[i];
        if (memchr(f->name, 0, sizeof f->name) == NULL || wsync_chain_file_name_check(f->name, NULL) != WSYNC_OK)
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "anchor %llu: file %u has a bad name",
                               (unsigned long long)e->step, (unsigned)i);
        if (i && f->tensors && !e->files[i - 1].tensors)
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0,
                               "anchor %llu: shard '%s' after a plain file (shards come first)",
                               (unsigned long long)e->step, f->name);
        if (!wsync_add_u64(total, f->bytes, &total))
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "anchor %llu: sizes overflow",
                               (unsigned long long)e->step);
    }
    {
        /* names unique: sorted, neighbours compared (a HEAD of many large
           directory anchors must not cost a quadratic parse) */
        const char *names[WSYNC_CHAIN_FILES_MAX];
        for (i = 0; i < e->n_files; i++) names[i] = e->files[i].name;
        qsort((void *)names, e->n_files, sizeof *names, wsync__cmp_cstr);
        for (j = 1; j < e->n_files; j++)
            if (strcmp(names[j - 1], names[j]) == 0)
                return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "anchor %llu: file '%s' twice",
                                   (unsigned long long)e->step, names[j]);
    }
    if (total != e->bytes || wsync__files_digest(e->files, e->n_files) != e->digest)
        return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0,
                           "anchor %llu: its bytes and digest are not its files' (%llu bytes listed, %llu given)",
                           (unsigned long long)e->step, (unsigned long long)total, (unsigned long long)e->bytes);
    return WSYNC_OK;
}

#ifndef WSYNC_NO_ENCODE
/* Gives c its own copy of every directory anchor's files (entries copied
   from other infos point into theirs), pointers set. */
static wsync_result wsync__info_own_files(wsync_chain_info *c, wsync_error *err)
{
    size_t i, n = 0, k = 0;
    wsync_chain_file *f = NULL;
    for (i = 0; i < c->n_entries; i++) n += c->entries[i].n_files;
    if (n && !(f = (wsync_chain_file *)wsync__alloc(&c->allocator, n * sizeof *f)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "HEAD files");
    for (i = 0; i < c->n_entries; i++) {
        wsync_chain_entry *e = &c->entries[i];
        if (!e->n_files) {
            e->files = NULL;
            continue;
        }
        memcpy(f + k, e->files, e->n_files * sizeof *f);
        e->files = f + k;
        k += e->n_files;
    }
    wsync__free(&c->allocator, c->files);
    c->files = f;
    c->n_files = n;
    return WSYNC_OK;
}
#endif /* WSYNC_NO_ENCODE */


static wsync_result wsync__chain_validate(const wsync_chain_info *c, wsync_error *err)
{
    size_t i;
    uint64_t top = 0, top_anchor = 0;
    int any_anchor = 0;
    if (!c->n_entries || c->n_entries > WSYNC__CHAIN_MAX_ENTRIES)
        return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "%s",
                           c->n_entries ? "too many objects" : "no objects");
    for (i = 0; i < c->n_entries; i++) {
        const wsync_chain_entry *e = &c->entries[i];
        if (e->kind != WSYNC_CHAIN_ANCHOR && e->kind != WSYNC_CHAIN_DELTA)
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "object %u has no kind", (unsigned)i);
        if (e->step > WSYNC_STEP_MAX)
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "step %llu above the limit",
                               (unsigned long long)e->step);
        if (i && wsync__cmp_entry(&c->entries[i - 1], e) >= 0)
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0,
                               "%s steps not strictly ascending at step %llu",
                               e->kind == WSYNC_CHAIN_ANCHOR ? "anchor" : "delta", (unsigned long long)e->step);
        if (e->kind == WSYNC_CHAIN_DELTA && e->base >= e->step)
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0,
                               "delta %llu has base %llu, not an earlier step", (unsigned long long)e->step,
                               (unsigned long long)e->base);
        if (e->kind == WSYNC_CHAIN_ANCHOR && e->base != e->step)
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "anchor %llu has a base",
                               (unsigned long long)e->step);
        if (e->n_files) {
            wsync_result r = wsync__files_validate(e, err);
            if (r != WSYNC_OK) return r;
        }
        if (e->step > top) top = e->step;
        if (e->kind == WSYNC_CHAIN_ANCHOR) any_anchor = 1, top_anchor = e->step;
    }
    if (c->has_head && !any_anchor)
        return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "%s", "no anchor");
    if (top != c->head_step)
        return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0,
                           "HEAD step %llu is not the newest object's step %llu",
                           (unsigned long long)c->head_step, (unsigned long long)top);
    if (any_anchor && top_anchor != c->anchor_step)
        return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0,
                           "HEAD anchor %llu is not the newest anchor %llu",
                           (unsigned long long)c->anchor_step, (unsigned long long)top_anchor);
    return WSYNC_OK;
}

WSYNC_DEF void wsync_chain_info_free(wsync_chain_info *c)
{
    if (!c) return;
    wsync__free(&c->allocator, c->entries);
    wsync__free(&c->allocator, c->files);
    memset(c, 0, sizeof *c);
}

/* ---- HEAD text: wsync_chain_head_format and _parse >>chain-head ---- */

static const char wsync__hexd[] = "0123456789abcdef";

static size_t wsync__put_hex64(char *o, uint64_t v)
{
    int i;
    for (i = 15; i >= 0; i--, v >>= 4) o[i] = wsync__hexd[v & 15];
    return 16;
}

/* n bytes as 2n lowercase hex digits and a NUL. */
static void wsync__put_hexbytes(char *o, const uint8_t *b, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) o[2 * i] = wsync__hexd[b[i] >> 4], o[2 * i + 1] = wsync__hexd[b[i] & 15];
    o[2 * n] = 0;
}

/* HEAD's text; signed with sign_key (64 bytes) unless NULL. */
static wsync_result wsync__head_format(const wsync_chain_info *c, const uint8_t *sign_key, char **text, size_t *len,
                                       wsync_error *err)
{
    size_t cap, o = 0, i;
    char *t, hex[17], big[2 * WSYNC_ED25519_SIG_SIZE + 1];
    int pass, version;
    wsync_result r;
    wsync__error_reset(err);
    if (!c || !text || !len)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "head_format arguments");
    *text = NULL;
    *len = 0;
    {
        wsync_chain_info h = *c;
        h.has_head = 1;
        if ((r = wsync__chain_validate(&h, err)) != WSYNC_OK) return r;
    }
    if (sign_key) { /* a signed HEAD names the chain and every object's hash */
        if (!c->has_id)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                               "a signed HEAD needs the chain's identity (has_id)");
        for (i = 0; i < c->n_entries; i++) {
            const wsync_chain_entry *e = &c->entries[i];
            size_t f;
            int ok = e->n_files ? 1 : e->has_hash;
            for (f = 0; f < e->n_files; f++) ok &= e->files[f].has_hash;
            if (!ok)
                return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                                   "a signed HEAD needs every object's hash: %s %llu has none",
                                   e->kind == WSYNC_CHAIN_ANCHOR ? "anchor" : "delta", (unsigned long long)e->step);
        }
    }
    {
        size_t nf = 0, fcap;
        for (i = 0; i < c->n_entries; i++) nf += c->entries[i].n_files;
        if (!wsync_mul_size(c->n_entries, 300, &cap) || !wsync_mul_size(nf, WSYNC_CHAIN_FILE_NAME_MAX + 200, &fcap) ||
            !wsync_add_size(cap, fcap, &cap) || !wsync_add_size(cap, 1024, &cap))
            return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, NULL, 0, "%s", "HEAD size");
        version = nf ? 2 : 1;
    }
    if (!(t = (char *)wsync__alloc(&c->allocator, cap)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "HEAD text");
    hex[16] = 0;
#define WSYNC__HEAD_PUT(...) (o += (size_t)snprintf(t + o, cap - o, __VA_ARGS__))
    wsync__put_hex64(hex, c->head_state);
    WSYNC__HEAD_PUT("{\"format\":\"wsync-chain\",\"version\":%d,\"step\":%llu,\"anchor\":%llu,\"state\":\"%s\"",
                    version, (unsigned long long)c->head_step, (unsigned long long)c->anchor_step, hex);
    if (c->encoding && wsync_encoding_name(c->encoding))
        WSYNC__HEAD_PUT(",\"encoding\":\"%s\"", wsync_encoding_name(c->encoding));
    if (c->has_id) {
        wsync__put_hexbytes(big, c->id, WSYNC_CHAIN_ID_SIZE);
        WSYNC__HEAD_PUT(",\"id\":\"%s\"", big);
    }
    if (sign_key) {
        uint8_t pub[WSYNC_ED25519_PUBLIC_SIZE];
        wsync_ed25519_keypair(sign_key, pub, NULL); /* the seed's, as the signature's */
        wsync__put_hexbytes(big, pub, sizeof pub);
        WSYNC__HEAD_PUT(",\"signer\":\"%s\"", big);
    }
    for (pass = 0; pass < 2; pass++) {
        wsync_chain_kind kind = pass ? WSYNC_CHAIN_DELTA : WSYNC_CHAIN_ANCHOR;
        int first = 1;
        WSYNC__HEAD_PUT(",\n\"%s\":[", pass ? "deltas" : "anchors");
        for (i = 0; i < c->n_entries; i++) {
            const wsync_chain_entry *e = &c->entries[i];
            char dh[17], sh[17];
            if (e->kind != kind) continue;
            dh[16] = sh[16] = 0;
            wsync__put_hex64(dh, e->digest);
            wsync__put_hex64(sh, e->state);
            WSYNC__HEAD_PUT("%s\n{\"step\":%llu,", first ? "" : ",", (unsigned long long)e->step);
            if (pass) WSYNC__HEAD_PUT("\"base\":%llu,", (unsigned long long)e->base);
            WSYNC__HEAD_PUT("\"bytes\":%llu,\"digest\":\"%s\",\"state\":\"%s\"", (unsigned long long)e->bytes, dh,
                            sh);
            if (pass && e->encoding && wsync_encoding_name(e->encoding))
                WSYNC__HEAD_PUT(",\"encoding\":\"%s\"", wsync_encoding_name(e->encoding));
            if (e->has_hash && !e->n_files) {
                wsync__put_hexbytes(big, e->hash, WSYNC_CHAIN_HASH_SIZE);
                WSYNC__HEAD_PUT(",\"blake2b\":\"%s\"", big);
            }
            if (e->n_files) {
                size_t f;
                WSYNC__HEAD_PUT(",\"files\":[");
                for (f = 0; f < e->n_files; f++) {
                    const wsync_chain_file *cf = &e->files[f];
                    dh[16] = 0;
                    wsync__put_hex64(dh, cf->digest);
                    WSYNC__HEAD_PUT("%s\n {\"name\":\"%s\",\"bytes\":%llu,\"digest\":\"%s\"", f ? "," : "", cf->name,
                                    (unsigned long long)cf->bytes, dh);
                    if (cf->tensors) WSYNC__HEAD_PUT(",\"tensors\":%llu", (unsigned long long)cf->tensors);
                    if (cf->has_hash) {
                        wsync__put_hexbytes(big, cf->hash, WSYNC_CHAIN_HASH_SIZE);
                        WSYNC__HEAD_PUT(",\"blake2b\":\"%s\"", big);
                    }
                    WSYNC__HEAD_PUT("}");
                }
                WSYNC__HEAD_PUT("]");
            }
            WSYNC__HEAD_PUT("}");
            first = 0;
        }
        WSYNC__HEAD_PUT("]");
    }
    WSYNC__HEAD_PUT(",\n");
    if (sign_key) { /* over every byte before the '"' that opens "sig" */
        uint8_t sig[WSYNC_ED25519_SIG_SIZE];
        wsync_ed25519_sign(sign_key, t, o, sig);
        wsync__put_hexbytes(big, sig, sizeof sig);
        WSYNC__HEAD_PUT("\"sig\":\"%s\",\n", big);
    }
    wsync__put_hex64(hex, wsync_digest(t, o));
    WSYNC__HEAD_PUT("\"check\":\"%s\"}\n", hex);
#undef WSYNC__HEAD_PUT
    WSYNC_ASSERT(o < cap);
    *text = t;
    *len = o;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_chain_head_format(const wsync_chain_info *c, char **text, size_t *len,
                                               wsync_error *err)
{
    return wsync__head_format(c, NULL, text, len, err);
}

WSYNC_DEF wsync_result wsync_chain_head_format_signed(const wsync_chain_info *c, const uint8_t sign_key[64],
                                                     char **text, size_t *len, wsync_error *err)
{
    if (!sign_key) {
        wsync__error_reset(err);
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no sign_key");
    }
    return wsync__head_format(c, sign_key, text, len, err);
}

/* A strict reader for HEAD's JSON: objects, arrays, plain strings (escapes
   only inside values it skips), unsigned integers without leading zeros. */
typedef struct wsync__jp {
    const char *s;
    size_t n, i;
} wsync__jp;

static void wsync__jp_ws(wsync__jp *p)
{
    p->i = wsync__js_ws((const uint8_t *)p->s, p->n, p->i);
}

static int wsync__jp_lit(wsync__jp *p, char c)
{
    wsync__jp_ws(p);
    if (p->i < p->n && p->s[p->i] == c) return p->i++, 1;
    return 0;
}

static int wsync__jp_str(wsync__jp *p, const char **out, size_t *len)
{
    size_t b;
    wsync__jp_ws(p);
    b = p->i;
    if (wsync__js_string((const uint8_t *)p->s, p->n, &p->i, WSYNC__JS_PLAIN, NULL, 0, len)) return 0;
    *out = p->s + b + 1;
    return 1;
}
static int wsync__jp_u64(wsync__jp *p, uint64_t *v)
{
    int is_uint, ovf;
    wsync__jp_ws(p);
    return !wsync__js_number((const uint8_t *)p->s, p->n, &p->i, &is_uint, v, &ovf) && is_uint && !ovf;
}
/* A string of exactly 2n lowercase hex digits, into n bytes. */
static int wsync__jp_hexbytes(wsync__jp *p, uint8_t *out, size_t n)
{
    const char *s;
    size_t len, k;
    if (!wsync__jp_str(p, &s, &len) || len != 2 * n) return 0;
    for (k = 0; k < 2 * n; k++) {
        char c = s[k];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else return 0;
        if (k & 1) out[k / 2] = (uint8_t)(out[k / 2] | d);
        else out[k / 2] = (uint8_t)(d << 4);
    }
    return 1;
}

/* A string of exactly 16 lowercase hex digits, as a 64-bit value. */
static int wsync__jp_hex64(wsync__jp *p, uint64_t *v)
{
    uint8_t b[8];
    if (!wsync__jp_hexbytes(p, b, 8)) return 0;
    *v = wsync__load_be64(b);
    return 1;
}

/* Skips any JSON value (unknown keys, for later versions), strictly: RFC
   8259 numbers and escapes, strict UTF-8, keys plain; `depth` the value's
   level, none deeper than 16. */
static int wsync__jp_skip(wsync__jp *p, int depth)
{
    return !wsync__js_skip((const uint8_t *)p->s, p->n, &p->i, WSYNC__JS_PLAIN | WSYNC__JS_UTF8 | WSYNC__JS_VALUES,
                           (uint32_t)depth, 16);
}

static int wsync__jp_key_is(const char *k, size_t kl, const char *lit)
{
    return strlen(lit) == kl && memcmp(k, lit, kl) == 0;
}

/* An encoding's name: a plain string under 16 characters; a name this
   reader does not know reads as 0 (a later version's encoding). */
static int wsync__jp_encoding(wsync__jp *p, wsync_encoding *enc)
{
    const char *v;
    size_t vl;
    char nm[16];
    if (!wsync__jp_str(p, &v, &vl) || vl >= sizeof nm) return 0;
    memcpy(nm, v, vl);
    nm[vl] = 0;
    *enc = wsync_encoding_from_name(nm);
    return 1;
}

#define WSYNC__HEAD_BAD(...) wsync__fail(err, WSYNC_ERR_BAD_HEAD, (uint64_t)p.i, NULL, 0, __VA_ARGS__)

/* An anchor's "files": [{name, bytes, digest, tensors (shards only)}], into
   out (the entry's count in *n). */
static wsync_result wsync__head_files(wsync__jp *pp, wsync__buf *out, size_t *n, wsync_error *err)
{
    wsync__jp p = *pp;
    *n = 0;
    if (!wsync__jp_lit(&p, '[')) return WSYNC__HEAD_BAD("%s", "\"files\" is not an array");
    if (wsync__jp_lit(&p, ']')) return WSYNC__HEAD_BAD("%s", "\"files\" is empty");
    for (;;) {
        wsync_chain_file f;
        unsigned seen = 0;
        memset(&f, 0, sizeof f);
        if (!wsync__jp_lit(&p, '{')) return WSYNC__HEAD_BAD("%s", "a file entry is not an object");
        if (!wsync__jp_lit(&p, '}')) for (;;) {
            const char *k, *v;
            size_t kl, vl;
            unsigned bit = 0;
            int ok;
            if (!wsync__jp_str(&p, &k, &kl) || !wsync__jp_lit(&p, ':'))
                return WSYNC__HEAD_BAD("%s", "expected a key in a file entry");
            if (wsync__jp_key_is(k, kl, "name")) {
                bit = 1;
                ok = wsync__jp_str(&p, &v, &vl) && vl < sizeof f.name;
                if (ok) memcpy(f.name, v, vl), f.name[vl] = 0;
                if (ok && wsync_chain_file_name_check(f.name, NULL) != WSYNC_OK)
                    return WSYNC__HEAD_BAD("file name '%s' is not allowed ([A-Za-z0-9._-], not starting with '.')",
                                           f.name);
            } else if (wsync__jp_key_is(k, kl, "bytes")) bit = 2, ok = wsync__jp_u64(&p, &f.bytes);
            else if (wsync__jp_key_is(k, kl, "digest")) bit = 4, ok = wsync__jp_hex64(&p, &f.digest);
            else if (wsync__jp_key_is(k, kl, "tensors")) bit = 8, ok = wsync__jp_u64(&p, &f.tensors) && f.tensors;
            else if (wsync__jp_key_is(k, kl, "blake2b"))
                bit = 16, ok = f.has_hash = wsync__jp_hexbytes(&p, f.hash, WSYNC_CHAIN_HASH_SIZE);
            else ok = wsync__jp_skip(&p, 4);
            if (!ok) return WSYNC__HEAD_BAD("bad value for \"%.*s\" in a file entry", (int)(kl > 32 ? 32 : kl), k);
            if (bit & seen) return WSYNC__HEAD_BAD("duplicate \"%.*s\" in a file entry", (int)kl, k);
            seen |= bit;
            if (wsync__jp_lit(&p, '}')) break;
            if (!wsync__jp_lit(&p, ',')) return WSYNC__HEAD_BAD("%s", "expected ',' or '}' in a file entry");
        }
        if ((seen & 7u) != 7u) return WSYNC__HEAD_BAD("%s", "a file entry needs name, bytes and digest");
        if (*n >= WSYNC_CHAIN_FILES_MAX) return WSYNC__HEAD_BAD("%s", "more than WSYNC_CHAIN_FILES_MAX files in an anchor");
        if (!wsync__buf_put(out, &f, sizeof f))
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "HEAD files");
        (*n)++;
        if (wsync__jp_lit(&p, ']')) break;
        if (!wsync__jp_lit(&p, ',')) return WSYNC__HEAD_BAD("%s", "expected ',' or ']' between file entries");
    }
    *pp = p;
    return WSYNC_OK;
}

static wsync_result wsync__head_entries(wsync__jp *pp, wsync_chain_kind kind, wsync__buf *out, wsync__buf *files,
                                        wsync_error *err)
{
    wsync__jp p = *pp;
    wsync_result r = WSYNC_OK;
    size_t first = out->len / sizeof(wsync_chain_entry);
    if (!wsync__jp_lit(&p, '[')) return WSYNC__HEAD_BAD("%s is not an array", kind == WSYNC_CHAIN_ANCHOR ? "anchors" : "deltas");
    if (wsync__jp_lit(&p, ']')) goto done;
    for (;;) {
        wsync_chain_entry e;
        unsigned seen = 0;
        memset(&e, 0, sizeof e);
        e.kind = kind;
        e.has_digests = 1;
        if (!wsync__jp_lit(&p, '{')) return WSYNC__HEAD_BAD("%s", "an object entry is not an object");
        if (!wsync__jp_lit(&p, '}')) for (;;) {
            const char *k;
            size_t kl;
            unsigned bit = 0;
            int ok;
            if (!wsync__jp_str(&p, &k, &kl) || !wsync__jp_lit(&p, ':'))
                return WSYNC__HEAD_BAD("%s", "expected a key in an object entry");
            if (wsync__jp_key_is(k, kl, "step")) bit = 1, ok = wsync__jp_u64(&p, &e.step);
            else if (wsync__jp_key_is(k, kl, "base")) bit = 2, ok = wsync__jp_u64(&p, &e.base);
            else if (wsync__jp_key_is(k, kl, "bytes")) bit = 4, ok = wsync__jp_u64(&p, &e.bytes);
            else if (wsync__jp_key_is(k, kl, "digest")) bit = 8, ok = wsync__jp_hex64(&p, &e.digest);
            else if (wsync__jp_key_is(k, kl, "state")) bit = 16, ok = wsync__jp_hex64(&p, &e.state);
            else if (kind == WSYNC_CHAIN_DELTA && wsync__jp_key_is(k, kl, "encoding"))
                bit = 32, ok = wsync__jp_encoding(&p, &e.encoding);
            else if (wsync__jp_key_is(k, kl, "blake2b"))
                bit = 128, ok = e.has_hash = wsync__jp_hexbytes(&p, e.hash, WSYNC_CHAIN_HASH_SIZE);
            else if (kind == WSYNC_CHAIN_ANCHOR && wsync__jp_key_is(k, kl, "files")) {
                if (seen & 64u) return WSYNC__HEAD_BAD("%s", "duplicate \"files\" in an object entry");
                if ((r = wsync__head_files(&p, files, &e.n_files, err)) != WSYNC_OK) return r;
                bit = 64, ok = 1;
            } else ok = wsync__jp_skip(&p, 2);
            if (!ok) return WSYNC__HEAD_BAD("bad value for \"%.*s\" in an object entry", (int)(kl > 32 ? 32 : kl), k);
            if (bit & seen) return WSYNC__HEAD_BAD("duplicate \"%.*s\" in an object entry", (int)kl, k);
            seen |= bit;
            if (wsync__jp_lit(&p, '}')) break;
            if (!wsync__jp_lit(&p, ',')) return WSYNC__HEAD_BAD("%s", "expected ',' or '}' in an object entry");
        }
        if ((seen & 29u) != 29u || (kind == WSYNC_CHAIN_DELTA) != ((seen & 2u) != 0))
            return WSYNC__HEAD_BAD("%s", kind == WSYNC_CHAIN_DELTA
                                             ? "a delta needs step, base, bytes, digest and state"
                                             : "an anchor needs step, bytes, digest and state (and no base)");
        if (kind == WSYNC_CHAIN_ANCHOR) e.base = e.step;
        if (e.step > WSYNC_STEP_MAX) return WSYNC__HEAD_BAD("step %llu above the limit", (unsigned long long)e.step);
        if (e.n_files) { /* the files just read are this anchor's */
            size_t f;
            for (f = files->len / sizeof(wsync_chain_file) - e.n_files; f < files->len / sizeof(wsync_chain_file); f++)
                ((wsync_chain_file *)(void *)files->p)[f].step = e.step;
        }
        if (out->len / sizeof e > first &&
            ((const wsync_chain_entry *)(const void *)(out->p + out->len - sizeof e))->step >= e.step)
            return WSYNC__HEAD_BAD("%s steps not strictly ascending at step %llu",
                                   kind == WSYNC_CHAIN_ANCHOR ? "anchor" : "delta", (unsigned long long)e.step);
        wsync__entry_key(&e);
        if (e.n_files) wsync__entry_dir_key(&e);
        if (out->len / sizeof e >= WSYNC__CHAIN_MAX_ENTRIES) return WSYNC__HEAD_BAD("%s", "too many objects");
        if (!wsync__buf_put(out, &e, sizeof e))
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "HEAD entries");
        if (wsync__jp_lit(&p, ']')) break;
        if (!wsync__jp_lit(&p, ',')) return WSYNC__HEAD_BAD("%s", "expected ',' or ']' between objects");
    }
done:
    *pp = p;
    return r;
}

WSYNC_DEF wsync_result wsync_chain_head_parse(const void *text, size_t len, const wsync_allocator *a,
                                              wsync_chain_info *out, wsync_error *err)
{
    wsync__jp p;
    wsync__buf ents, files;
    wsync_chain_info c;
    unsigned seen = 0;
    uint64_t version = 0, check = 0;
    size_t check_at = 0;
    wsync_result r = WSYNC_OK;
    wsync__error_reset(err);
    if (!out || (!text && len))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "head_parse arguments");
    memset(out, 0, sizeof *out);
    memset(&c, 0, sizeof c);
    if (a) c.allocator = *a;
    memset(&ents, 0, sizeof ents);
    ents.a = &c.allocator;
    memset(&files, 0, sizeof files);
    files.a = &c.allocator;
    p.s = (const char *)text;
    p.n = len;
    p.i = 0;
    if (len > ((size_t)WSYNC__CHAIN_MAX_ENTRIES + 16) * 256) return WSYNC__HEAD_BAD("%s", "HEAD too large");
    if (!wsync__jp_lit(&p, '{')) return WSYNC__HEAD_BAD("%s", "not a JSON object");
    for (;;) {
        const char *k;
        size_t kl, at;
        unsigned bit;
        int ok = 1;
        wsync__jp_ws(&p);
        at = p.i;
        if (seen & 256u) {
            r = WSYNC__HEAD_BAD("%s", "\"check\" must be the last key");
            goto fail;
        }
        if (!wsync__jp_str(&p, &k, &kl) || !wsync__jp_lit(&p, ':')) {
            r = WSYNC__HEAD_BAD("%s", "expected a key");
            goto fail;
        }
        if ((seen & 2048u) && !wsync__jp_key_is(k, kl, "check")) {
            r = WSYNC__HEAD_BAD("%s", "\"sig\" must come just before \"check\"");
            goto fail;
        }
        if (wsync__jp_key_is(k, kl, "format")) {
            const char *v;
            size_t vl;
            bit = 1;
            ok = wsync__jp_str(&p, &v, &vl) && wsync__jp_key_is(v, vl, "wsync-chain");
        } else if (wsync__jp_key_is(k, kl, "version")) {
            bit = 2;
            ok = wsync__jp_u64(&p, &version) && (version == 1 || version == 2);
        } else if (wsync__jp_key_is(k, kl, "step")) bit = 4, ok = wsync__jp_u64(&p, &c.head_step);
        else if (wsync__jp_key_is(k, kl, "anchor")) bit = 8, ok = wsync__jp_u64(&p, &c.anchor_step);
        else if (wsync__jp_key_is(k, kl, "state")) bit = 16, ok = wsync__jp_hex64(&p, &c.head_state);
        else if (wsync__jp_key_is(k, kl, "encoding")) bit = 32, ok = wsync__jp_encoding(&p, &c.encoding);
        else if (wsync__jp_key_is(k, kl, "anchors") || wsync__jp_key_is(k, kl, "deltas")) {
            int d = k[0] == 'd';
            bit = d ? 128u : 64u;
            if (seen & bit) {
                r = WSYNC__HEAD_BAD("duplicate key \"%s\"", d ? "deltas" : "anchors");
                goto fail;
            }
            if ((r = wsync__head_entries(&p, d ? WSYNC_CHAIN_DELTA : WSYNC_CHAIN_ANCHOR, &ents, &files, err)) !=
                WSYNC_OK)
                goto fail;
        } else if (wsync__jp_key_is(k, kl, "check")) {
            bit = 256;
            check_at = at;
            ok = wsync__jp_hex64(&p, &check);
        } else if (wsync__jp_key_is(k, kl, "id")) {
            bit = 512;
            ok = c.has_id = wsync__jp_hexbytes(&p, c.id, WSYNC_CHAIN_ID_SIZE);
        } else if (wsync__jp_key_is(k, kl, "signer")) {
            bit = 1024;
            ok = wsync__jp_hexbytes(&p, c.signer, WSYNC_ED25519_PUBLIC_SIZE);
        } else if (wsync__jp_key_is(k, kl, "sig")) {
            bit = 2048;
            c.sig_at = at;
            ok = c.has_sig = wsync__jp_hexbytes(&p, c.sig, WSYNC_ED25519_SIG_SIZE);
        } else {
            bit = 0;
            ok = wsync__jp_skip(&p, 1);
        }
        if (!ok) {
            r = WSYNC__HEAD_BAD("bad value for \"%.*s\"", (int)(kl > 32 ? 32 : kl), k);
            goto fail;
        }
        if (seen & bit & ~192u) {
            r = WSYNC__HEAD_BAD("duplicate key \"%.*s\"", (int)(kl > 32 ? 32 : kl), k);
            goto fail;
        }
        seen |= bit;
        if (wsync__jp_lit(&p, '}')) break;
        if (!wsync__jp_lit(&p, ',')) {
            r = WSYNC__HEAD_BAD("%s", "expected ',' or '}'");
            goto fail;
        }
    }
    wsync__jp_ws(&p);
    if (p.i != p.n) {
        r = WSYNC__HEAD_BAD("%s", "bytes after the JSON object");
        goto fail;
    }
    if ((seen & 0x1DFu) != 0x1DFu) {
        static const char *names[] = {"format", "version", "step", "anchor", "state", "", "anchors", "deltas", "check"};
        unsigned b;
        for (b = 0; b < 9 && (seen & (1u << b)); b++) {}
        while (b == 5 || (b < 9 && (seen & (1u << b)))) b++;
        r = WSYNC__HEAD_BAD("missing \"%s\"", b < 9 ? names[b] : "?");
        goto fail;
    }
    if (wsync_digest(text, check_at) != check) {
        r = wsync__fail(err, WSYNC_ERR_BAD_HEAD, (uint64_t)check_at, NULL, 0, "%s",
                        "the digest in \"check\" does not match HEAD's bytes (torn or corrupt)");
        goto fail;
    }
    if (files.len && version != 2) {
        r = wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "%s",
                        "an anchor with \"files\" in a version 1 HEAD (directory anchors are version 2)");
        goto fail;
    }
    if (((seen & 1024u) != 0) != ((seen & 2048u) != 0) || ((seen & 2048u) && !(seen & 512u))) {
        r = wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "%s",
                        "a signed HEAD has \"signer\", \"id\" and \"sig\" (one without the others)");
        goto fail;
    }
    if (seen & 2048u) { /* a signed HEAD names every object's hash */
        const wsync_chain_entry *ev = (const wsync_chain_entry *)(const void *)ents.p;
        const wsync_chain_file *fv = (const wsync_chain_file *)(const void *)files.p;
        size_t i, ne = ents.len / sizeof *ev, nf = files.len / sizeof *fv;
        int all = 1;
        for (i = 0; i < ne; i++) all &= ev[i].n_files || ev[i].has_hash;
        for (i = 0; i < nf; i++) all &= fv[i].has_hash;
        if (!all) {
            r = wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "%s",
                            "a signed HEAD names every object's \"blake2b\" (each file's in a directory's anchor)");
            goto fail;
        }
    }
    c.entries = (wsync_chain_entry *)ents.p;
    c.n_entries = ents.len / sizeof(wsync_chain_entry);
    c.files = (wsync_chain_file *)(void *)files.p;
    c.n_files = files.len / sizeof(wsync_chain_file);
    c.has_head = 1;
    ents.p = NULL;
    files.p = NULL;
    if (c.n_entries) qsort(c.entries, c.n_entries, sizeof *c.entries, wsync__cmp_entry);
    {
        /* anchors came ascending, their files in the same order */
        size_t i, k = 0;
        for (i = 0; i < c.n_entries; i++) {
            wsync_chain_entry *e = &c.entries[i];
            if (!e->n_files) continue;
            if (k + e->n_files > c.n_files || c.files[k].step != e->step) {
                wsync_chain_info_free(&c);
                return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0, "%s", "files out of order");
            }
            e->files = c.files + k;
            k += e->n_files;
        }
    }
    if ((r = wsync__chain_validate(&c, err)) != WSYNC_OK) {
        wsync_chain_info_free(&c);
        return r;
    }
    *out = c;
    return WSYNC_OK;
fail:
    wsync__buf_free(&ents);
    wsync__buf_free(&files);
    return r;
}
#undef WSYNC__HEAD_BAD

/* HEAD (parsed from text into c) against a subscriber's key: signed, by
   that key, over these bytes. */
static wsync_result wsync__head_check_sig(const wsync_chain_info *c, const void *text, const uint8_t *key,
                                          wsync_error *err)
{
    char got[2 * WSYNC_ED25519_PUBLIC_SIZE + 1], want[2 * WSYNC_ED25519_PUBLIC_SIZE + 1];
    if (!c->has_sig)
        return wsync__fail(err, WSYNC_ERR_SIGNATURE, UINT64_MAX, NULL, 0, "%s",
                           "HEAD is not signed, and a verify key is set: an unsigned chain, or a HEAD written by "
                           "a publisher without its sign key or by someone else");
    if (memcmp(c->signer, key, WSYNC_ED25519_PUBLIC_SIZE) != 0) {
        wsync__put_hexbytes(got, c->signer, WSYNC_ED25519_PUBLIC_SIZE);
        wsync__put_hexbytes(want, key, WSYNC_ED25519_PUBLIC_SIZE);
        return wsync__fail(err, WSYNC_ERR_SIGNATURE, UINT64_MAX, NULL, 0,
                           "HEAD is signed by another key (%s), not the verify key (%s)", got, want);
    }
    if (!wsync_ed25519_verify(key, text, c->sig_at, c->sig))
        return wsync__fail(err, WSYNC_ERR_SIGNATURE, (uint64_t)c->sig_at, NULL, 0, "%s",
                           "HEAD's signature does not verify: its bytes were changed after it was signed");
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_chain_head_verify(const void *text, size_t len, const uint8_t verify_key[32],
                                               const wsync_allocator *a, wsync_chain_info *out, wsync_error *err)
{
    wsync_chain_info c;
    wsync_result r;
    if (out) memset(out, 0, sizeof *out);
    if (!verify_key) {
        wsync__error_reset(err);
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no verify_key");
    }
    if ((r = wsync_chain_head_parse(text, len, a, &c, err)) != WSYNC_OK) return r;
    if ((r = wsync__head_check_sig(&c, text, verify_key, err)) != WSYNC_OK) {
        wsync_chain_info_free(&c);
        return r;
    }
    if (out) *out = c;
    else wsync_chain_info_free(&c);
    return WSYNC_OK;
}

/* ---- reading a chain: HEAD, or a listing for a bucket without one >>chain-read ---- */

typedef struct wsync__listing {
    wsync__buf b;
    wsync_chain_kind kind;
    size_t plen;
    int oom;
} wsync__listing;

/* "step_000041.safetensors" or "step_41.safetensors" -> 41: "step_", 1 to
   15 decimal digits (leading zeros allowed, and counted: so at most
   WSYNC_STEP_MAX, no overflow; no sign, space or anything else), then
   ".safetensors"; 0 if the name is anything else. */
static int wsync__step_name(const char *s, uint64_t *step)
{
    uint64_t v = 0;
    size_t d = 0;
    if (strncmp(s, "step_", 5) != 0) return 0;
    s += 5;
    while (s[d] >= '0' && s[d] <= '9') {
        if (d >= 15) return 0;
        v = v * 10 + (uint64_t)(s[d] - '0');
        d++;
    }
    if (!d || strcmp(s + d, ".safetensors") != 0) return 0;
    *step = v;
    return 1;
}

/* "step_000060/NAME" -> 60 (a model directory's anchor object); *dlen the
   length of "step_000060/". */
static int wsync__dir_step_name(const char *s, uint64_t *step, size_t *dlen)
{
    uint64_t v = 0;
    size_t d = 0;
    if (strncmp(s, "step_", 5) != 0) return 0;
    while (s[5 + d] >= '0' && s[5 + d] <= '9') {
        if (d >= 15) return 0;
        v = v * 10 + (uint64_t)(s[5 + d] - '0');
        d++;
    }
    if (!d || s[5 + d] != '/' || !s[6 + d] || strchr(s + 6 + d, '/')) return 0;
    *step = v;
    *dlen = 6 + d;
    return 1;
}

static int wsync__listing_fn(void *user, const char *key, uint64_t size)
{
    wsync__listing *l = (wsync__listing *)user;
    wsync_chain_entry e;
    const char *rest = key + l->plen;
    size_t dlen = 0;
    if (strlen(key) < l->plen) return 0;
    memset(&e, 0, sizeof e);
    if (strchr(rest, '/')) {
        /* a model directory's anchor (anchors/step_N/NAME): step N is
           taken, though only a HEAD says how to read it (its shards'
           order); listed once, with no size, so that nothing plans a read
           of it but a publisher never writes over it */
        const wsync_chain_entry *last =
            l->b.len ? (const wsync_chain_entry *)(const void *)(l->b.p + l->b.len - sizeof e) : NULL;
        if (l->kind != WSYNC_CHAIN_ANCHOR || !wsync__dir_step_name(rest, &e.step, &dlen) || dlen > 40) return 0;
        if (last && last->kind == WSYNC_CHAIN_ANCHOR && last->step == e.step && last->key[strlen(last->key) - 1] == '/')
            return 0;
        e.kind = WSYNC_CHAIN_ANCHOR;
        e.base = e.step;
        snprintf(e.key, sizeof e.key, "anchors/%.*s", (int)dlen, rest);
        if (!wsync__buf_put(&l->b, &e, sizeof e)) return l->oom = 1, 1;
        return 0;
    }
    if (!wsync__step_name(rest, &e.step)) return 0;
    e.kind = l->kind;
    e.base = e.step;
    e.bytes = size;
    /* the key as listed ("step_41" as well as "step_000041"): fetched by it */
    snprintf(e.key, sizeof e.key, "%s/%s", e.kind == WSYNC_CHAIN_ANCHOR ? "anchors" : "deltas", rest);
    if (!wsync__buf_put(&l->b, &e, sizeof e)) return l->oom = 1, 1;
    return 0;
}

static wsync_result wsync__chain_list(const wsync_store *s, const char *prefix, wsync_chain_info *c, wsync_error *err)
{
    wsync__listing l;
    char path[WSYNC__KEY_MAX];
    int pass;
    size_t i, n;
    wsync_result r;
    memset(&l, 0, sizeof l);
    l.b.a = &c->allocator;
    for (pass = 0; pass < 2; pass++) {
        l.kind = pass ? WSYNC_CHAIN_DELTA : WSYNC_CHAIN_ANCHOR;
        if (!wsync__chain_path(path, sizeof path, prefix, pass ? "deltas/" : "anchors/"))
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "prefix too long");
        l.plen = strlen(path);
        if (!s->list) return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s", "the store cannot list");
        if ((r = s->list(s->user, path, wsync__listing_fn, &l, err)) != WSYNC_OK) {
            wsync__buf_free(&l.b);
            return r;
        }
        if (l.oom) {
            wsync__buf_free(&l.b);
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "listing");
        }
    }
    n = l.b.len / sizeof(wsync_chain_entry);
    if (!n) {
        wsync__buf_free(&l.b);
        return wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "%s", "no HEAD and no objects: an empty chain");
    }
    c->entries = (wsync_chain_entry *)l.b.p;
    c->n_entries = n;
    qsort(c->entries, n, sizeof *c->entries, wsync__cmp_entry);
    /* Without HEAD, a delta's base is the previous step listed (anchor or
       delta): entries are anchors then deltas, each ascending, so one walk
       through the anchors alongside the deltas finds it. A first delta
       without a predecessor gets step - 1. A guess, which
       wsync__sub_check_object holds each delta to before it is applied. */
    {
        size_t a = 0, na = 0;
        int have_prev = 0;
        uint64_t prev = 0;
        while (na < n && c->entries[na].kind == WSYNC_CHAIN_ANCHOR) na++;
        for (i = 0; i < n; i++) {
            wsync_chain_entry *e = &c->entries[i];
            if (e->step > c->head_step) c->head_step = e->step;
            if (e->kind == WSYNC_CHAIN_ANCHOR) {
                c->anchor_step = e->step;
                continue;
            }
            while (a < na && c->entries[a].step < e->step) {
                if (!have_prev || c->entries[a].step > prev) prev = c->entries[a].step;
                have_prev = 1;
                a++;
            }
            e->base = have_prev ? prev : e->step ? e->step - 1 : 0;
            prev = e->step; /* the next delta's predecessor, unless an anchor lies between */
            have_prev = 1;
        }
    }
    return WSYNC_OK;
}

/* A listing that names one step of one kind under two keys
   ("step_7.safetensors" and "step_000007.safetensors") is ambiguous: which
   object is the step is not known, so neither is chosen. WSYNC_ERR_BAD_HEAD,
   the code of every chain that breaks its rules (with HEAD or without): a
   publisher refuses it unless asked for a new chain, a subscriber stays
   where it is. */
static wsync_result wsync__chain_list_unique(const wsync_chain_info *c, wsync_error *err)
{
    size_t i;
    for (i = 1; i < c->n_entries; i++) {
        const wsync_chain_entry *a = &c->entries[i - 1], *b = &c->entries[i];
        if (a->kind == b->kind && a->step == b->step) {
            if (strcmp(a->key, b->key) > 0) {
                const wsync_chain_entry *t = a;
                a = b, b = t;
            }
            return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0,
                               "%s step %llu listed under two keys, '%s' and '%s' (no HEAD): which is the step "
                               "is not known",
                               a->kind == WSYNC_CHAIN_ANCHOR ? "anchor" : "delta", (unsigned long long)a->step,
                               a->key, b->key);
        }
    }
    return WSYNC_OK;
}

/* wsync_chain_read; *listed: 1 when there was no HEAD (read from a listing). */
static wsync_result wsync__chain_read(const wsync_store *store, const wsync_chain_options *opt,
                                      wsync_chain_info *out, int *listed, wsync_error *err)
{
    char prefix[WSYNC__PREFIX_MAX], key[WSYNC__KEY_MAX];
    uint8_t *bytes = NULL;
    uint64_t size = 0;
    wsync_allocator a;
    wsync_result r;
    wsync__error_reset(err);
    if (listed) *listed = 0;
    if (!store || !out || !store->get)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_chain_read arguments");
    memset(out, 0, sizeof *out);
    memset(&a, 0, sizeof a);
    if (opt) a = opt->allocator;
    if ((r = wsync__chain_prefix(prefix, opt ? opt->prefix : NULL, err)) != WSYNC_OK) return r;
    wsync__chain_path(key, sizeof key, prefix, "HEAD");
    r = wsync_store_get_capped(store, key, WSYNC_CHAIN_HEAD_MAX_SIZE, 0, &a, &bytes, &size, err);
    if (r == WSYNC_ERR_NOT_FOUND) {
        out->allocator = a;
        wsync__error_reset(err);
        if (listed) *listed = 1;
        if ((r = wsync__chain_list(store, prefix, out, err)) == WSYNC_OK &&
            (r = wsync__chain_list_unique(out, err)) != WSYNC_OK)
            wsync_chain_info_free(out);
        return r;
    }
    if (r != WSYNC_OK) return r;
    r = wsync_chain_head_parse(bytes, (size_t)size, &a, out, err);
    if (r == WSYNC_OK && opt && opt->verify_key && (r = wsync__head_check_sig(out, bytes, opt->verify_key, err)) != WSYNC_OK)
        wsync_chain_info_free(out);
    wsync__free(&a, bytes);
    if (r != WSYNC_OK) return wsync__obj_fail(err, r, key);
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_chain_read(const wsync_store *store, const wsync_chain_options *opt,
                                        wsync_chain_info *out, wsync_error *err)
{
    int listed = 0;
    wsync_result r = wsync__chain_read(store, opt, out, &listed, err);
    if (r == WSYNC_OK && listed && opt && opt->verify_key) {
        /* objects without HEAD: nothing signed names them */
        uint64_t n = out->n_entries, top = out->head_step;
        wsync_chain_info_free(out);
        return wsync__fail(err, WSYNC_ERR_SIGNATURE, UINT64_MAX, NULL, 0,
                           "no HEAD, yet %llu objects under anchors/ and deltas/ (newest step %llu): a chain "
                           "without HEAD is not signed, and a verify key is set",
                           (unsigned long long)n, (unsigned long long)top);
    }
    return r;
}

/* ---- digests of a model: the state digest >>state-digest ---- */

typedef struct wsync__named {
    const char *name;
    uint64_t digest;
} wsync__named;

static int wsync__cmp_named(const void *a, const void *b)
{
    return strcmp(((const wsync__named *)a)->name, ((const wsync__named *)b)->name);
}

/* The state digest from per-tensor digests (tensors in any order). */
static wsync_result wsync__state_of(const wsync_tensor *t, const uint64_t *dig, size_t n,
                                    const wsync_allocator *a, uint64_t *out, wsync_error *err)
{
    wsync__named *v;
    wsync_digest_state ds;
    size_t i;
    if (!(v = (wsync__named *)wsync__alloc(a, n * sizeof *v + 1)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "state digest");
    for (i = 0; i < n; i++) v[i].name = t[i].name, v[i].digest = dig[i];
    if (n) qsort(v, n, sizeof *v, wsync__cmp_named);
    wsync_digest_init(&ds);
    for (i = 0; i < n; i++) {
        uint8_t le[8];
        unsigned k;
        for (k = 0; k < 8; k++) le[k] = (uint8_t)(v[i].digest >> (8 * k));
        wsync_digest_update(&ds, le, 8);
    }
    *out = wsync_digest_final(&ds);
    wsync__free(a, v);
    return WSYNC_OK;
}

static wsync_result wsync__check_tensors(const wsync_tensor *t, size_t n, wsync_error *err)
{
    size_t i;
    if (n && !t) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "tensors missing");
    for (i = 0; i < n; i++) {
        uint64_t nelem = 1, nb;
        uint32_t k;
        if (!t[i].name)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "tensor %u has no name", (unsigned)i);
        if (t[i].rank && !t[i].shape)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, t[i].name, strlen(t[i].name), "%s", "no shape");
        for (k = 0; k < t[i].rank; k++)
            if (!wsync_mul_u64(nelem, t[i].shape[k], &nelem))
                return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, t[i].name, strlen(t[i].name), "%s", "shape");
        if (wsync_dtype_nbytes(t[i].dtype, nelem, &nb) != WSYNC_OK || nb != t[i].nbytes || nb > (uint64_t)SIZE_MAX)
            return wsync__fail(err, WSYNC_ERR_SIZE_MISMATCH, UINT64_MAX, t[i].name, strlen(t[i].name),
                               "nbytes %llu does not match the dtype and shape", (unsigned long long)t[i].nbytes);
        if (nb && !t[i].data)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, t[i].name, strlen(t[i].name), "%s", "no data");
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_state_digest(const wsync_tensor *t, size_t n, unsigned threads, uint64_t *out,
                                          wsync_error *err)
{
    uint64_t *dig;
    wsync_result r;
    wsync__error_reset(err);
    if (!out) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no output");
    if ((r = wsync__check_tensors(t, n, err)) != WSYNC_OK) return r;
    if (!(dig = (uint64_t *)wsync__alloc(NULL, n * sizeof *dig + 1)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "digests");
    r = wsync__tensor_digests(t, n, threads, dig, err);
    if (r == WSYNC_OK) r = wsync__state_of(t, dig, n, NULL, out, err);
    wsync__free(NULL, dig);
    return r;
}

/* ---- copying tensors on worker threads ---- */

typedef struct wsync__copyjob {
    wsync_tensor *dst;
    const void *const *src;
} wsync__copyjob;

static wsync_result wsync__copy_item(void *user, unsigned worker, size_t i, wsync_error *err)
{
    wsync__copyjob *j = (wsync__copyjob *)user;
    (void)worker;
    (void)err;
    if (j->src[i] && j->dst[i].nbytes) memcpy(j->dst[i].data, j->src[i], (size_t)j->dst[i].nbytes);
    return WSYNC_OK;
}

#ifndef WSYNC_NO_ENCODE
/* ======================================================================
   Publisher  >>publisher
   ====================================================================== */

struct wsync_publisher {
    wsync_store store;
    wsync_chain_options o;
    wsync_allocator a;
    char prefix[WSYNC__PREFIX_MAX];
    int has_info;
    wsync_chain_info info;
    /* WSYNC_CHAIN_NEW_CHAIN: the newest step in the store when opened; only
       steps after it are published, so no old object is overwritten */
    int has_floor;
    uint64_t floor;
    /* A chain started where the store showed nothing (no HEAD, an empty
       listing): until its first HEAD is written, no object is put over one
       already there (a listing that lied: a server that does not list this
       folder, a listing that failed as "nothing") */
    int fresh;
    /* The last published image, kept as an anchor file in memory (header
       then data) so that an anchor is one put of this buffer. */
    int has_image;
    uint64_t image_step;
    uint8_t *file;
    uint64_t file_size, header_size;
    size_t n;
    wsync_tensor *img;     /* views into file */
    char *names;
    uint64_t *shapes;
    uint64_t *dig, *ndig;  /* digests of img, and of the next image */
    /* F32 inputs cast to BF16 */
    uint8_t *cast;
    size_t cast_size;
    wsync_tensor *next;
    /* the encodes' memory (scratch, the delta's buffer), kept from one
       publish to the next (made at the first encode; NULL before) */
    wsync_pool *pool;
    /* wsync_publisher_set_layout: anchors as a directory */
    size_t n_shards, n_lfiles;
    struct wsync__lay_shard *shards;
    struct wsync__lay_file *lfiles;
    /* signed chains: wsync_chain_options.sign_key copied (o.sign_key points
       here), its public key (o.verify_key: the chain read at open and the
       image restored are checked with it), the chain's identity */
    int signing;
    uint8_t sec[WSYNC_ED25519_SECRET_SIZE], pub[WSYNC_ED25519_PUBLIC_SIZE];
    uint8_t id[WSYNC_CHAIN_ID_SIZE];
};

typedef struct wsync__lay_shard {
    char name[WSYNC_CHAIN_FILE_NAME_MAX];
    size_t first, count;
    wsync_st_kv *meta;          /* the trainer's, copied (one allocation with the strings) */
    size_t n_meta;
    int has_format, has_step;
} wsync__lay_shard;

typedef struct wsync__lay_file {
    char name[WSYNC_CHAIN_FILE_NAME_MAX];
    uint8_t *data;
    uint64_t size, digest;
} wsync__lay_file;

/* The refusal of a chain the publisher cannot take over: r is BAD_HEAD
   (err says why: HEAD's failure, or with `listed` a listing's), or OK for a
   listing without HEAD (c). */
static wsync_result wsync__pub_refuse(const wsync_chain_info *c, wsync_result r, int listed, wsync_error *err)
{
    static const char way_out[] =
        ". Not published over, since a new chain's retention could delete objects not its own. Restore HEAD, use "
        "another prefix, or start a new chain here with WSYNC_CHAIN_NEW_CHAIN (wsync publish --new-chain): it keeps "
        "every object and publishes only steps after the newest one there";
    static const char way_out_listed[] =
        ". Not published over: remove one, use another prefix, or start a new chain here with "
        "WSYNC_CHAIN_NEW_CHAIN (wsync publish --new-chain), which keeps every object";
    const char *way = listed && r == WSYNC_ERR_BAD_HEAD ? way_out_listed : way_out;
    size_t wl = strlen(way) + 1;
    char what[sizeof err->message + 64];
    size_t n;
    wsync_result code = r == WSYNC_ERR_SIGNATURE ? r : WSYNC_ERR_BAD_HEAD;
    if (!err) return code;
    if (r == WSYNC_ERR_BAD_HEAD && listed)
        snprintf(what, sizeof what, "%s", err->message);
    else if (r == WSYNC_ERR_BAD_HEAD)
        snprintf(what, sizeof what, "HEAD fails its check (%s)", err->message);
    else if (r == WSYNC_ERR_SIGNATURE)
        snprintf(what, sizeof what, "HEAD fails the check with this publisher's key (%s)", err->message);
    else
        snprintf(what, sizeof what, "no HEAD, yet %llu objects under anchors/ and deltas/ (newest step %llu): "
                 "a foreign or damaged chain", (unsigned long long)c->n_entries, (unsigned long long)c->head_step);
    wsync__fail(err, code, UINT64_MAX, NULL, 0, "%s", "");
    /* the way out is never cut: what failed is, when both do not fit */
    n = strlen(what);
    if (n > sizeof err->message - wl) n = sizeof err->message - wl;
    memcpy(err->message, what, n);
    memcpy(err->message + n, way, wl);
    return code;
}

/* 16 bytes for a new chain's identity: unique rather than secret (two
   chains signed by one key must differ). SHA-512 over the secret key, the
   system's random bytes where there are some (/dev/urandom), the time, the
   process and an address. */
static void wsync__random_id(uint8_t id[WSYNC_CHAIN_ID_SIZE], const uint8_t *mix, size_t mix_len)
{
    wsync_sha512_state h;
    uint8_t out[64];
    uint64_t v[4];
    wsync_sha512_init(&h);
    wsync_sha512_update(&h, mix, mix_len);
#if WSYNC__POSIX
    {
        uint8_t rnd[32];
        struct timeval tv;
        int fd = open("/dev/urandom", O_RDONLY);
        if (fd >= 0) {
            ssize_t got = read(fd, rnd, sizeof rnd);
            if (got > 0) wsync_sha512_update(&h, rnd, (size_t)got);
            close(fd);
        }
        gettimeofday(&tv, NULL);
        v[0] = (uint64_t)tv.tv_sec, v[1] = (uint64_t)tv.tv_usec, v[2] = (uint64_t)getpid();
    }
#else
    v[0] = (uint64_t)time(NULL), v[1] = (uint64_t)clock(), v[2] = 0;
#endif
    v[3] = (uint64_t)(uintptr_t)&h;
    wsync_sha512_update(&h, v, sizeof v);
    wsync_sha512_final(&h, out);
    memcpy(id, out, WSYNC_CHAIN_ID_SIZE);
}

/* WSYNC_CHAIN_NEW_CHAIN: the newest step under anchors/ and deltas/, listed
   (HEAD may be broken, or name fewer objects than lie there), and HEAD's
   step when HEAD is valid (`valid`). */
static wsync_result wsync__pub_floor(wsync_publisher *p, const wsync_chain_info *valid, wsync_error *err)
{
    wsync_chain_info l;
    wsync_result r;
    memset(&l, 0, sizeof l);
    l.allocator = p->a;
    wsync__error_reset(err);
    r = wsync__chain_list(&p->store, p->prefix, &l, err);
    if (r == WSYNC_OK) {
        p->has_floor = 1;
        p->floor = l.head_step;
    } else if (r == WSYNC_ERR_UNSUPPORTED) {
        return wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s",
                           "a new chain publishes only after the newest step in the store, and this store "
                           "cannot list its objects");
    } else if (r != WSYNC_ERR_NOT_FOUND) {
        return r;
    }
    wsync_chain_info_free(&l);
    wsync__error_reset(err);
    if (valid && valid->has_head && (!p->has_floor || valid->head_step > p->floor)) {
        p->has_floor = 1;
        p->floor = valid->head_step;
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_publisher_open(const wsync_store *store, const wsync_chain_options *opt,
                                            wsync_publisher **out, wsync_error *err)
{
    wsync_publisher *p;
    wsync_allocator a;
    wsync_result r;
    char prefix[WSYNC__PREFIX_MAX];
    int listed = 0;
    wsync__error_reset(err);
    if (!store || !out || !store->get || !store->put)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_publisher_open arguments");
    *out = NULL;
    if ((r = wsync__chain_prefix(prefix, opt ? opt->prefix : NULL, err)) != WSYNC_OK) return r;
    if (opt && (opt->anchor_fraction < 0 || opt->anchor_fraction > 1e9 || opt->anchor_fraction != opt->anchor_fraction))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "anchor_fraction out of range");
    if (opt && opt->encoding && !wsync_encoding_name(opt->encoding))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "unknown encoding");
    memset(&a, 0, sizeof a);
    if (opt) a = opt->allocator;
    if (!(p = (wsync_publisher *)wsync__alloc(&a, sizeof *p)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "publisher");
    memset(p, 0, sizeof *p);
    p->store = *store;
    if (opt) p->o = *opt;
    p->a = a;
    memcpy(p->prefix, prefix, sizeof prefix);
    p->o.prefix = p->prefix;
    if (!p->o.encoding) p->o.encoding = WSYNC_ENCODING_PACKED;
    if (!p->o.anchor_every) p->o.anchor_every = 20;
    if (p->o.anchor_fraction == 0) p->o.anchor_fraction = 0.5;
    if (!p->o.retain) p->o.retain = 2 * p->o.anchor_every;
    p->o.verify_key = NULL;
    p->o.sign_key = NULL;
    if (opt && opt->sign_key) {
        /* a secret key whose halves disagree (damaged, or pasted from two
           keys) would sign as one key and name another */
        memcpy(p->sec, opt->sign_key, sizeof p->sec);
        wsync_ed25519_keypair(p->sec, p->pub, NULL);
        if (memcmp(p->pub, p->sec + 32, sizeof p->pub) != 0) {
            memset(p->sec, 0, sizeof p->sec);
            wsync__free(&a, p);
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                               "sign_key's last 32 bytes are not the public key of its first 32 (the seed): a "
                               "damaged key? (wsync_ed25519_keypair makes the 64 bytes)");
        }
        p->signing = 1;
        p->o.sign_key = p->sec;
        p->o.verify_key = p->pub; /* the chain continued must be this key's */
    }
    r = wsync__chain_read(store, &p->o, &p->info, &listed, err);
    if (r == WSYNC_OK && p->info.has_head && !p->signing && p->info.has_sig &&
        !(p->o.flags & WSYNC_CHAIN_NEW_CHAIN)) {
        /* unsigned HEADs over a signed chain: every follower with the key
           would refuse them */
        char k[2 * WSYNC_ED25519_PUBLIC_SIZE + 1];
        wsync__put_hexbytes(k, p->info.signer, WSYNC_ED25519_PUBLIC_SIZE);
        wsync_chain_info_free(&p->info);
        wsync__free(&a, p);
        return wsync__fail(err, WSYNC_ERR_SIGNATURE, UINT64_MAX, NULL, 0,
                           "the chain is signed (by %s) and this publisher has no sign key: publish with its key "
                           "(wsync_chain_options.sign_key, wsync publish --sign-key), or start a new, unsigned "
                           "chain here with WSYNC_CHAIN_NEW_CHAIN (wsync publish --new-chain)", k);
    }
    if (r == WSYNC_OK && p->info.has_head && !(p->o.flags & WSYNC_CHAIN_NEW_CHAIN)) {
        p->has_info = 1;
        if (p->signing) memcpy(p->id, p->info.id, sizeof p->id); /* a signed HEAD names it */
    } else if (r == WSYNC_ERR_NOT_FOUND) {
        /* an empty store: a new chain, which starts with an anchor */
        wsync__error_reset(err);
        p->fresh = 1;
    } else if (r == WSYNC_OK || r == WSYNC_ERR_BAD_HEAD || r == WSYNC_ERR_SIGNATURE) {
        /* A HEAD that fails its check (or, with a sign key, is not this
           key's), or objects without HEAD (a foreign or damaged chain): a
           new chain there would name none of them, and so must not delete
           any; only on request, and keeping them all. */
        if (!(p->o.flags & WSYNC_CHAIN_NEW_CHAIN)) r = wsync__pub_refuse(&p->info, r, listed, err);
        else r = wsync__pub_floor(p, r == WSYNC_OK ? &p->info : NULL, err);
        wsync_chain_info_free(&p->info);
        memset(&p->info, 0, sizeof p->info);
        if (r != WSYNC_OK) {
            wsync__free(&a, p);
            return r;
        }
    } else {
        wsync__free(&a, p);
        return r;
    }
    if (p->signing && !p->has_info) wsync__random_id(p->id, p->sec, sizeof p->sec); /* a new chain */
    *out = p;
    return WSYNC_OK;
}

WSYNC_DEF int wsync_publisher_head(const wsync_publisher *p, uint64_t *step)
{
    if (!p || !p->has_info) return 0;
    if (step) *step = p->info.head_step;
    return 1;
}

static void wsync__pub_free_image(wsync_publisher *p)
{
    wsync__free(&p->a, p->file);
    wsync__free(&p->a, p->img);
    wsync__free(&p->a, p->names);
    wsync__free(&p->a, p->shapes);
    wsync__free(&p->a, p->dig);
    wsync__free(&p->a, p->ndig);
    p->file = NULL;
    p->img = NULL;
    p->names = NULL;
    p->shapes = NULL;
    p->dig = p->ndig = NULL;
    p->n = 0;
    p->has_image = 0;
}

static void wsync__pub_free_layout(wsync_publisher *p)
{
    size_t i;
    for (i = 0; i < p->n_lfiles; i++) wsync__free(&p->a, p->lfiles[i].data);
    for (i = 0; p->shards && i < p->n_shards; i++) wsync__free(&p->a, p->shards[i].meta);
    wsync__free(&p->a, p->shards);
    wsync__free(&p->a, p->lfiles);
    p->shards = NULL;
    p->lfiles = NULL;
    p->n_shards = p->n_lfiles = 0;
}

WSYNC_DEF wsync_result wsync_publisher_set_layout(wsync_publisher *p, const wsync_anchor_shard *shards,
                                                  size_t n_shards, const wsync_anchor_file *files, size_t n_files,
                                                  wsync_error *err)
{
    size_t i, j, next = 0;
    wsync_result r;
    wsync__error_reset(err);
    if (!p || (n_shards && !shards) || (n_files && !files))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "set_layout arguments");
    if (!n_shards && n_files)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "files travel with a directory's anchor: give its shards too");
    if (n_shards + n_files > WSYNC_CHAIN_FILES_MAX)
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%llu shards and files, above %u",
                           (unsigned long long)(n_shards + n_files), (unsigned)WSYNC_CHAIN_FILES_MAX);
    for (i = 0; i < n_shards + n_files; i++) {
        const char *nm = i < n_shards ? shards[i].name : files[i - n_shards].name;
        if ((r = wsync_chain_file_name_check(nm, err)) != WSYNC_OK) return r;
        for (j = 0; j < i; j++)
            if (strcmp(nm, j < n_shards ? shards[j].name : files[j - n_shards].name) == 0)
                return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, nm, strlen(nm), "'%s' named twice",
                                   nm);
        if (i < n_shards) {
            if (!shards[i].count || shards[i].first != next)
                return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, nm, strlen(nm),
                                   "shard '%s' must hold the next tensors (from %llu, at least one)", nm,
                                   (unsigned long long)next);
            next += shards[i].count;
            if (shards[i].n_metadata && !shards[i].metadata)
                return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, nm, strlen(nm),
                                   "shard '%s' has %llu metadata keys and no array", nm,
                                   (unsigned long long)shards[i].n_metadata);
            for (j = 0; j < shards[i].n_metadata; j++) {
                const wsync_st_kv *kv = &shards[i].metadata[j];
                size_t kl, vl;
                if (!kv->key || !kv->value)
                    return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, nm, strlen(nm),
                                       "shard '%s': metadata entry %llu has no key or value", nm,
                                       (unsigned long long)j);
                kl = kv->key_len ? kv->key_len : strlen(kv->key);
                vl = kv->value_len ? kv->value_len : strlen(kv->value);
                if ((kl == 5 && memcmp(kv->key, "wsync", 5) == 0) ||
                    (kl == 6 && memcmp(kv->key, "format", 6) == 0 && !(vl == 2 && memcmp(kv->value, "pt", 2) == 0)))
                    return wsync__fail(err, WSYNC_ERR_INVALID_METADATA, UINT64_MAX, nm, strlen(nm),
                                       "shard '%s': __metadata__ \"%.*s\" is the anchor's own (\"wsync\"; "
                                       "\"format\" other than \"pt\")", nm, (int)(kl < 64 ? kl : 64), kv->key);
            }
        } else if (files[i - n_shards].size && !files[i - n_shards].data) {
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, nm, strlen(nm), "file '%s' has no data", nm);
        }
    }
    wsync__pub_free_layout(p);
    if (!n_shards) return WSYNC_OK;
    p->shards = (wsync__lay_shard *)wsync__alloc(&p->a, n_shards * sizeof *p->shards);
    p->lfiles = (wsync__lay_file *)wsync__alloc(&p->a, n_files * sizeof *p->lfiles + 1);
    if (!p->shards || !p->lfiles) {
        wsync__pub_free_layout(p);
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "layout");
    }
    memset(p->lfiles, 0, n_files * sizeof *p->lfiles);
    memset(p->shards, 0, n_shards * sizeof *p->shards);
    p->n_shards = n_shards;
    for (i = 0; i < n_shards; i++) {
        wsync__lay_shard *sh = &p->shards[i];
        size_t strings = 0, m = shards[i].n_metadata;
        char *at;
        memcpy(sh->name, shards[i].name, strlen(shards[i].name) + 1);
        sh->first = shards[i].first;
        sh->count = shards[i].count;
        if (!m) continue;
        for (j = 0; j < m; j++) {
            const wsync_st_kv *kv = &shards[i].metadata[j];
            size_t kl = kv->key_len ? kv->key_len : strlen(kv->key), vl = kv->value_len ? kv->value_len : strlen(kv->value);
            if (kl > SIZE_MAX / 4 || vl > SIZE_MAX / 4 || strings > SIZE_MAX / 2) goto meta_oom;
            strings += kl + vl + 2;
        }
        if (m > (SIZE_MAX - strings) / sizeof *sh->meta - 1 ||
            !(sh->meta = (wsync_st_kv *)wsync__alloc(&p->a, m * sizeof *sh->meta + strings + 1)))
            goto meta_oom;
        at = (char *)(sh->meta + m);
        for (j = 0; j < m; j++) {
            const wsync_st_kv *kv = &shards[i].metadata[j];
            wsync_st_kv *o = &sh->meta[j];
            size_t kl = kv->key_len ? kv->key_len : strlen(kv->key), vl = kv->value_len ? kv->value_len : strlen(kv->value);
            memcpy(at, kv->key, kl), at[kl] = 0, o->key = at, o->key_len = kl, at += kl + 1;
            memcpy(at, kv->value, vl), at[vl] = 0, o->value = at, o->value_len = vl, at += vl + 1;
            if (kl == 6 && memcmp(o->key, "format", 6) == 0) sh->has_format = 1;
            if (kl == 4 && memcmp(o->key, "step", 4) == 0) sh->has_step = 1;
        }
        sh->n_meta = m;
        continue;
    meta_oom:
        wsync__pub_free_layout(p);
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, shards[i].name, strlen(shards[i].name),
                           "the metadata of shard '%s'", shards[i].name);
    }
    for (i = 0; i < n_files; i++) {
        wsync__lay_file *f = &p->lfiles[i];
        memcpy(f->name, files[i].name, strlen(files[i].name) + 1);
        if (files[i].size > (uint64_t)SIZE_MAX - 1 ||
            !(f->data = (uint8_t *)wsync__alloc(&p->a, (size_t)files[i].size + 1))) {
            p->n_lfiles = i;
            wsync__pub_free_layout(p);
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, files[i].name, strlen(files[i].name),
                               "%llu bytes for file '%s'", (unsigned long long)files[i].size, files[i].name);
        }
        if (files[i].size) memcpy(f->data, files[i].data, (size_t)files[i].size);
        f->size = files[i].size;
        f->digest = wsync_digest(f->data, (size_t)f->size);
        p->n_lfiles = i + 1;
    }
    return WSYNC_OK;
}

/* 1 when the layout set is not the one HEAD's newest anchor was written in. */
static int wsync__pub_layout_differs(const wsync_publisher *p)
{
    long k = wsync__chain_find(&p->info, WSYNC_CHAIN_ANCHOR, p->info.anchor_step);
    const wsync_chain_entry *e;
    size_t i;
    if (k < 0) return 1;
    e = &p->info.entries[k];
    if (e->n_files != p->n_shards + p->n_lfiles) return 1;
    for (i = 0; i < e->n_files; i++) {
        const wsync_chain_file *f = &e->files[i];
        if (i < p->n_shards) {
            if (strcmp(f->name, p->shards[i].name) != 0 || f->tensors != p->shards[i].count) return 1;
        } else {
            const wsync__lay_file *l = &p->lfiles[i - p->n_shards];
            if (f->tensors || strcmp(f->name, l->name) != 0 || f->bytes != l->size || f->digest != l->digest) return 1;
        }
    }
    return 0;
}

WSYNC_DEF void wsync_publisher_close(wsync_publisher *p)
{
    wsync_allocator a;
    if (!p) return;
    wsync__pub_free_layout(p);
    wsync__pub_free_image(p);
    memset(p->sec, 0, sizeof p->sec);
    wsync__free(&p->a, p->cast);
    wsync__free(&p->a, p->next);
    wsync_pool_free(p->pool);
    wsync_chain_info_free(&p->info);
    a = p->a;
    wsync__free(&a, p);
}

/* The anchor header for `step` over the image's layout, into b. */
static wsync_result wsync__anchor_header(const wsync_publisher *p, const wsync_tensor *t, size_t n, uint64_t step,
                                         const wsync__lay_shard *sh, wsync__buf *b, wsync_error *err)
{
    wsync_st_tensor_desc *d;
    wsync_st_writer w;
    wsync_st_write_options wo;
    wsync_st_kv own[3], *meta = own;
    size_t n_meta = 3;
    char num[32];
    size_t i;
    wsync_result r;
    if (!(d = (wsync_st_tensor_desc *)wsync__alloc(&p->a, n * sizeof *d + 1)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor header");
    if (sh && sh->n_meta &&
        !(meta = (wsync_st_kv *)wsync__alloc(&p->a, (sh->n_meta + 3) * sizeof *meta))) {
        wsync__free(&p->a, d);
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor header");
    }
    memset(d, 0, n * sizeof *d);
    for (i = 0; i < n; i++) {
        d[i].name = t[i].name;
        d[i].dtype = t[i].dtype;
        d[i].rank = t[i].rank;
        d[i].shape = t[i].shape;
        d[i].nbytes = t[i].nbytes;
    }
    snprintf(num, sizeof num, "%06llu", (unsigned long long)step); /* fixed width: the header keeps its size */
    memset(own, 0, sizeof own);
    if (meta == own) {
        meta[0].key = "format", meta[0].value = "pt";
        meta[1].key = "wsync", meta[1].value = "anchor";
        meta[2].key = "step", meta[2].value = num;
    } else { /* the trainer's keys, "step" taking the anchor's, then ours */
        n_meta = 0;
        for (i = 0; i < sh->n_meta; i++) {
            meta[n_meta] = sh->meta[i];
            if (meta[n_meta].key_len == 4 && memcmp(meta[n_meta].key, "step", 4) == 0)
                meta[n_meta].value = num, meta[n_meta].value_len = 0;
            n_meta++;
        }
        memset(meta + n_meta, 0, 3 * sizeof *meta);
        meta[n_meta].key = "wsync", meta[n_meta++].value = "anchor";
        if (!sh->has_format) meta[n_meta].key = "format", meta[n_meta++].value = "pt";
        if (!sh->has_step) meta[n_meta].key = "step", meta[n_meta++].value = num;
    }
    memset(&wo, 0, sizeof wo);
    wo.allocator = p->a;
    b->len = 0;
    r = wsync_st_writer_begin(&w, d, n, meta, n_meta, wsync__getall_sink, b, &wo, err);
    if (meta != own) wsync__free(&p->a, meta);
    wsync__free(&p->a, d);
    return r;
}

/* A fresh image laid out like `t` (names and shapes copied), contents
   unset, header for `step`. */
static wsync_result wsync__pub_layout(wsync_publisher *p, const wsync_tensor *t, size_t n, uint64_t step,
                                      wsync_error *err)
{
    wsync__getall hb;
    size_t i, names = 0, dims = 0;
    uint64_t data = 0, off = 0;
    char *np;
    uint64_t *sp;
    wsync_result r;
    wsync__pub_free_image(p);
    for (i = 0; i < n; i++) {
        names += strlen(t[i].name) + 1;
        dims += t[i].rank;
        if (!wsync_add_u64(data, t[i].nbytes, &data))
            return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, NULL, 0, "%s", "model size");
    }
    p->img = (wsync_tensor *)wsync__alloc(&p->a, n * sizeof *p->img + 1);
    p->names = (char *)wsync__alloc(&p->a, names + 1);
    p->shapes = (uint64_t *)wsync__alloc(&p->a, dims * sizeof *p->shapes + 1);
    p->dig = (uint64_t *)wsync__alloc(&p->a, n * sizeof *p->dig + 1);
    p->ndig = (uint64_t *)wsync__alloc(&p->a, n * sizeof *p->ndig + 1);
    if (!p->img || !p->names || !p->shapes || !p->dig || !p->ndig) goto oom;
    np = p->names;
    sp = p->shapes;
    for (i = 0; i < n; i++) {
        size_t l = strlen(t[i].name) + 1;
        p->img[i] = t[i];
        memcpy(np, t[i].name, l);
        p->img[i].name = np;
        np += l;
        if (t[i].rank) memcpy(sp, t[i].shape, t[i].rank * sizeof *sp);
        p->img[i].shape = sp;
        sp += t[i].rank;
    }
    p->n = n;
    memset(&hb, 0, sizeof hb);
    hb.b.a = &p->a;
    if ((r = wsync__anchor_header(p, p->img, n, step, NULL, &hb.b, err)) != WSYNC_OK) {
        wsync__buf_free(&hb.b);
        wsync__pub_free_image(p);
        return r;
    }
    p->header_size = hb.b.len;
    if (!wsync_add_u64(data, p->header_size, &p->file_size) || p->file_size > (uint64_t)SIZE_MAX) {
        wsync__buf_free(&hb.b);
        wsync__pub_free_image(p);
        return wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, NULL, 0, "%s", "model size");
    }
    if (!(p->file = (uint8_t *)wsync__alloc(&p->a, (size_t)p->file_size))) {
        wsync__buf_free(&hb.b);
        goto oom;
    }
    memcpy(p->file, hb.b.p, hb.b.len);
    wsync__buf_free(&hb.b);
    for (i = 0; i < n; i++) {
        p->img[i].data = p->file + p->header_size + off;
        off += t[i].nbytes;
    }
    return WSYNC_OK;
oom:
    wsync__pub_free_image(p);
    return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "the publisher's image");
}

/* Rewrites the image's header for `step`; moves the data when the header's
   size changes (steps past 999999). */
static wsync_result wsync__pub_restep(wsync_publisher *p, uint64_t step, wsync_error *err)
{
    wsync__getall hb;
    wsync_result r;
    memset(&hb, 0, sizeof hb);
    hb.b.a = &p->a;
    if ((r = wsync__anchor_header(p, p->img, p->n, step, NULL, &hb.b, err)) != WSYNC_OK) goto done;
    if (hb.b.len == p->header_size) {
        memcpy(p->file, hb.b.p, hb.b.len);
    } else {
        uint64_t data = p->file_size - p->header_size, off = 0;
        uint8_t *nf = (uint8_t *)wsync__alloc(&p->a, (size_t)(hb.b.len + data));
        size_t i;
        if (!nf) {
            r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "the publisher's image");
            goto done;
        }
        memcpy(nf, hb.b.p, hb.b.len);
        memcpy(nf + hb.b.len, p->file + p->header_size, (size_t)data);
        wsync__free(&p->a, p->file);
        p->file = nf;
        p->header_size = hb.b.len;
        p->file_size = hb.b.len + data;
        for (i = 0; i < p->n; i++) {
            p->img[i].data = p->file + p->header_size + off;
            off += p->img[i].nbytes;
        }
    }
done:
    wsync__buf_free(&hb.b);
    return r;
}

static int wsync__same_layout(const wsync_tensor *a, const wsync_tensor *b, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if (strcmp(a[i].name, b[i].name) != 0 || a[i].dtype != b[i].dtype || a[i].rank != b[i].rank ||
            a[i].nbytes != b[i].nbytes)
            return 0;
        if (a[i].rank && memcmp(a[i].shape, b[i].shape, a[i].rank * sizeof *a[i].shape) != 0) return 0;
    }
    return 1;
}

/* The published view of the caller's tensors: F32 cast to BF16. */
static wsync_result wsync__pub_view(wsync_publisher *p, const wsync_tensor *t, size_t n, wsync_error *err)
{
    size_t i, need = 0, off = 0;
    int keep = (p->o.flags & WSYNC_CHAIN_KEEP_F32) != 0;
    wsync__free(&p->a, p->next);
    if (!(p->next = (wsync_tensor *)wsync__alloc(&p->a, n * sizeof *p->next + 1)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "tensor views");
    for (i = 0; i < n; i++)
        if (t[i].dtype == WSYNC_DTYPE_F32 && !keep) need += (size_t)(t[i].nbytes / 2);
    if (need > p->cast_size) {
        wsync__free(&p->a, p->cast);
        p->cast_size = 0;
        if (!(p->cast = (uint8_t *)wsync__alloc(&p->a, need)))
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "the BF16 cast of F32 tensors");
        p->cast_size = need;
    }
    for (i = 0; i < n; i++) {
        p->next[i] = t[i];
        if (t[i].dtype == WSYNC_DTYPE_F32 && !keep) {
            size_t ne = (size_t)(t[i].nbytes / 4);
            p->next[i].dtype = WSYNC_DTYPE_BF16;
            p->next[i].nbytes = t[i].nbytes / 2;
            p->next[i].data = p->cast + off;
            wsync_f32_to_bf16_n((const float *)t[i].data, (uint16_t *)(void *)(p->cast + off), ne);
            off += ne * 2;
        }
    }
    return WSYNC_OK;
}

/* Rebuilds the image of HEAD's step from the store (a new process
   continuing a chain). Leaves has_image 0 when it cannot. */
static void wsync__pub_restore(wsync_publisher *p, const wsync_tensor *view, size_t n)
{
    wsync_subscriber *s = NULL;
    wsync_chain_options o = p->o;
    wsync_sync_stats st;
    uint64_t state = 0; /* set by wsync__state_of; gcc 12 at -O3 -march=native cannot see it */
    if (wsync__pub_layout(p, view, n, p->info.head_step, NULL) != WSYNC_OK) return;
    o.flags &= ~WSYNC_CHAIN_VERIFY_STATE; /* checked below, once */
    if (wsync_subscriber_open(&p->store, p->img, n, &o, &s, NULL) != WSYNC_OK) return;
    if (wsync_subscriber_sync(s, p->info.head_step, &st, NULL) == WSYNC_OK && st.step == p->info.head_step &&
        wsync__tensor_digests(p->img, n, p->o.threads, p->dig, NULL) == WSYNC_OK &&
        wsync__state_of(p->img, p->dig, n, &p->a, &state, NULL) == WSYNC_OK && state == p->info.head_state) {
        p->has_image = 1;
        p->image_step = p->info.head_step;
    }
    wsync_subscriber_close(s);
}

/* Retention: deletes the objects that the previous HEAD (p->info) named
   and the new one (ni) does not, and only those: an object no HEAD of this
   chain named (another writer's, a TRL bucket's, or one a killed publisher
   left) is not provably the chain's to delete. `gone` holds them (room for
   p->info's entries); an object whose delete fails goes back into ni, so
   HEAD names it (it is still a valid object) and the next publish tries
   again. Returns how many went back. */
static uint64_t wsync__pub_collect(wsync_publisher *p, wsync_chain_info *ni, const wsync_chain_entry *gone,
                                   size_t n_gone, uint64_t *deleted)
{
    char key[WSYNC__KEY_MAX];
    uint64_t failed = 0;
    size_t i;
    for (i = 0; i < n_gone; i++) {
        wsync_error e;
        wsync_result r = WSYNC_ERR_UNSUPPORTED;
        if (gone[i].n_files) {
            /* a directory anchor: each of its objects; kept named while any stays */
            size_t f, left = 0;
            char rel[WSYNC__KEY_MAX];
            for (f = 0; f < gone[i].n_files && p->store.del; f++) {
                snprintf(rel, sizeof rel, "%s%s", gone[i].key, gone[i].files[f].name);
                r = wsync__chain_path(key, sizeof key, p->prefix, rel) ? p->store.del(p->store.user, key, &e)
                                                                        : WSYNC_ERR_INVALID_ARGUMENT;
                if (r != WSYNC_OK && r != WSYNC_ERR_NOT_FOUND) left++;
            }
            if (!p->store.del || left) ni->entries[ni->n_entries++] = gone[i], failed++;
            else (*deleted)++;
            continue;
        }
        wsync__chain_path(key, sizeof key, p->prefix, gone[i].key);
        if (p->store.del) r = p->store.del(p->store.user, key, &e);
        if (r == WSYNC_OK) (*deleted)++;
        else if (r != WSYNC_ERR_NOT_FOUND) ni->entries[ni->n_entries++] = gone[i], failed++;
    }
    if (failed) qsort(ni->entries, ni->n_entries, sizeof *ni->entries, wsync__cmp_entry);
    return failed;
}

/* HEAD's text for ni, put. */
static wsync_result wsync__pub_head(wsync_publisher *p, const wsync_chain_info *ni, wsync_error *err)
{
    char key[WSYNC__KEY_MAX];
    char *head = NULL;
    size_t head_len = 0;
    wsync_result r;
    if ((r = wsync__head_format(ni, p->signing ? p->sec : NULL, &head, &head_len, err)) != WSYNC_OK) return r;
    wsync__chain_path(key, sizeof key, p->prefix, "HEAD");
    if ((r = p->store.put(p->store.user, key, head, head_len, err)) != WSYNC_OK) wsync__obj_fail(err, r, "HEAD");
    else p->fresh = 0;
    wsync__free(&p->a, head);
    return r;
}

/* An object's BLAKE2b-256 for a signed HEAD, computed while the object is
   put: on a thread of its own where there are threads and the object is
   large (a 1.2 GB anchor's hash, 1.5-2 s of one core, then runs beside
   its upload instead of before it), else at once. start, put, finish;
   the bytes must not change in between. */
typedef struct wsync__hashjob {
    const uint8_t *p;
    size_t n;
    uint8_t out[WSYNC_CHAIN_HASH_SIZE];
    int threaded;
#if WSYNC__HAVE_THREADS
    pthread_t th;
#endif
} wsync__hashjob;

static void *wsync__hashjob_run(void *arg)
{
    wsync__hashjob *j = (wsync__hashjob *)arg;
    wsync_blake2b(j->p, j->n, j->out, WSYNC_CHAIN_HASH_SIZE);
    return NULL;
}

static void wsync__hash_start(wsync__hashjob *j, const void *bytes, size_t n)
{
    j->p = (const uint8_t *)bytes;
    j->n = n;
    j->threaded = 0;
#if WSYNC__HAVE_THREADS
    if (n >= ((size_t)16 << 20) && pthread_create(&j->th, NULL, wsync__hashjob_run, j) == 0) {
        j->threaded = 1;
        return;
    }
#endif
    wsync__hashjob_run(j);
}

static void wsync__hash_finish(wsync__hashjob *j, uint8_t out[WSYNC_CHAIN_HASH_SIZE])
{
#if WSYNC__HAVE_THREADS
    if (j->threaded) pthread_join(j->th, NULL);
#endif
    j->threaded = 0;
    memcpy(out, j->out, WSYNC_CHAIN_HASH_SIZE);
}

/* A fresh chain's object (see wsync_publisher.fresh) must not be there yet. */
static wsync_result wsync__pub_absent(wsync_publisher *p, const char *key, const char *rel, wsync_error *err)
{
    uint64_t size = 0;
    wsync_result r;
    if (!p->fresh || !p->store.head) return WSYNC_OK;
    r = p->store.head(p->store.user, key, &size, err);
    if (r == WSYNC_ERR_NOT_FOUND) {
        wsync__error_reset(err);
        return WSYNC_OK;
    }
    if (r != WSYNC_OK) return wsync__obj_fail(err, r, rel);
    return wsync__fail(err, WSYNC_ERR_BAD_HEAD, UINT64_MAX, NULL, 0,
                       "object '%s' is already in the store (%llu bytes), though the store showed no HEAD and "
                       "its listing no objects: the listing cannot be trusted (a server that does not list this "
                       "folder?) and this may be another chain's; nothing was written over it",
                       rel, (unsigned long long)size);
}

static wsync_result wsync__pub_put(wsync_publisher *p, const wsync_chain_entry *e, const void *bytes, size_t len,
                                   wsync_error *err)
{
    char key[WSYNC__KEY_MAX];
    wsync_result r;
    wsync__chain_path(key, sizeof key, p->prefix, e->key);
    if ((r = wsync__pub_absent(p, key, e->key, err)) != WSYNC_OK) return r;
    r = p->store.put(p->store.user, key, bytes, len, err);
    if (r != WSYNC_OK) return wsync__obj_fail(err, r, e->key);
    return WSYNC_OK;
}

/* The image's anchor as a directory: each shard a safetensors file of its
   tensors, then the files; e gets the entry, *files_out its objects (free
   them). A shard is put from the image itself: its header is written over
   the bytes just before its data (kept and put back), so no shard is
   copied. */
static wsync_result wsync__pub_put_dir(wsync_publisher *p, uint64_t step, wsync_chain_entry *e,
                                       wsync_chain_file **files_out, wsync_error *err)
{
    size_t nf = p->n_shards + p->n_lfiles, i, k;
    wsync_chain_file *files = (wsync_chain_file *)wsync__alloc(&p->a, nf * sizeof *files);
    wsync__buf save;
    wsync__getall hg;
    char rel[WSYNC__KEY_MAX], key[WSYNC__KEY_MAX];
    wsync_result r = WSYNC_OK;
    memset(&hg, 0, sizeof hg);
    hg.b.a = &p->a;
    memset(&save, 0, sizeof save);
    save.a = &p->a;
    *files_out = NULL;
    if (!files) return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor files");
    memset(files, 0, nf * sizeof *files);
    memset(e, 0, sizeof *e);
    e->kind = WSYNC_CHAIN_ANCHOR;
    e->step = e->base = step;
    e->has_digests = 1;
    wsync__entry_dir_key(e);
    for (i = 0; i < nf && r == WSYNC_OK; i++) {
        wsync_chain_file *f = &files[i];
        const uint8_t *bytes;
        uint64_t len;
        wsync__hashjob hj;
        uint8_t *start = NULL, *copy = NULL;
        size_t hlen = 0;
        f->step = step;
        if (i < p->n_shards) {
            const wsync__lay_shard *sh = &p->shards[i];
            uint64_t dlen = 0;
            memcpy(f->name, sh->name, strlen(sh->name) + 1);
            f->tensors = sh->count;
            if ((r = wsync__anchor_header(p, p->img + sh->first, sh->count, step, sh, &hg.b, err)) != WSYNC_OK) break;
            hlen = hg.b.len;
            start = (uint8_t *)p->img[sh->first].data;
            for (k = 0; k < sh->count; k++) {
                const wsync_tensor *t = &p->img[sh->first + k];
                if (t->nbytes && (uint8_t *)t->data != start + dlen) start = NULL; /* not laid out in order */
                dlen += t->nbytes;
            }
            if (!start || (size_t)(start - p->file) < hlen) {
                /* no room before it: one copy of this shard */
                if (dlen > (uint64_t)SIZE_MAX - hlen || !(copy = (uint8_t *)wsync__alloc(&p->a, hlen + (size_t)dlen + 1))) {
                    r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "shard '%s'", sh->name);
                    break;
                }
                memcpy(copy, hg.b.p, hlen);
                for (k = 0, len = hlen; k < sh->count; k++) {
                    const wsync_tensor *t = &p->img[sh->first + k];
                    if (t->nbytes) memcpy(copy + len, t->data, (size_t)t->nbytes);
                    len += t->nbytes;
                }
                bytes = copy;
            } else {
                save.len = 0;
                if (!wsync__buf_reserve(&save, hlen)) {
                    r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "shard '%s'", sh->name);
                    break;
                }
                memcpy(save.p, start - hlen, hlen);
                memcpy(start - hlen, hg.b.p, hlen);
                bytes = start - hlen;
                len = hlen + dlen;
            }
        } else {
            const wsync__lay_file *l = &p->lfiles[i - p->n_shards];
            memcpy(f->name, l->name, strlen(l->name) + 1);
            bytes = l->data;
            len = l->size;
        }
        f->bytes = len;
        f->digest = wsync_digest(bytes, (size_t)len);
        if (p->signing) wsync__hash_start(&hj, bytes, (size_t)len);
        snprintf(rel, sizeof rel, "%s%s", e->key, f->name);
        if (!wsync__chain_path(key, sizeof key, p->prefix, rel))
            r = wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "the key of '%s' is too long", rel);
        else if ((r = wsync__pub_absent(p, key, rel, err)) == WSYNC_OK &&
                 (r = p->store.put(p->store.user, key, bytes, (size_t)len, err)) != WSYNC_OK)
            wsync__obj_fail(err, r, rel);
        if (p->signing) {
            wsync__hash_finish(&hj, f->hash); /* before the bytes change back */
            f->has_hash = 1;
        }
        if (start && !copy && i < p->n_shards) memcpy(start - hlen, save.p, hlen); /* the image as it was */
        wsync__free(&p->a, copy);
        if (!wsync_add_u64(e->bytes, f->bytes, &e->bytes) && r == WSYNC_OK)
            r = wsync__fail(err, WSYNC_ERR_OVERFLOW, UINT64_MAX, NULL, 0, "%s", "anchor size");
    }
    wsync__buf_free(&hg.b);
    wsync__buf_free(&save);
    if (r != WSYNC_OK) {
        wsync__free(&p->a, files);
        return r;
    }
    e->digest = wsync__files_digest(files, nf);
    e->files = files;
    e->n_files = nf;
    *files_out = files;
    return WSYNC_OK;
}

/* wsync_publish: the delta against the last published image, encoded in
   place (the image becomes this step's as it is diffed), into delta; kept
   when it is at most anchor_fraction of an anchor, else an anchor is due. */
static wsync_result wsync__pub_encode(wsync_publisher *p, uint64_t step, size_t n, wsync__getall *delta,
                                      wsync_allocator *pool_a, wsync_publish_stats *st, int *keep_delta,
                                      int *want_anchor, wsync_error *err)
{
    wsync_result r;
    wsync_delta_options d;
    wsync_delta_stats ds;
    /* The encode's scratch and the delta's buffer come from a pool kept
       between publishes: fresh pages cost a fault each on first touch,
       and in a virtual machine here that made the encode of a 1.2 GB
       model 3 to 8 times slower than the same encode through a pool
       (2.7 thousand faults, 0.25-1 s). */
    if (!p->pool) p->pool = wsync_pool_new(wsync__pool_keep(p->next, n), &p->a);
    if (p->pool) {
        *pool_a = wsync_pool_allocator(p->pool);
        delta->b.a = pool_a;
    }
    memset(&d, 0, sizeof d);
    d.allocator = *delta->b.a;
    d.encoding = p->o.encoding;
    d.base_step = p->image_step;
    d.step = step;
    d.base_digests = p->dig;
    d.result_digests_out = p->ndig;
    d.threads = p->o.threads;
    d.flags = WSYNC_DELTA_UPDATE_BASE; /* the image becomes this step's as it is diffed */
    p->has_image = 0;                  /* until the encode completes */
    if (p->o.encoding == WSYNC_ENCODING_TRL_V1 || p->o.encoding == WSYNC_ENCODING_TRL_V3) d.result_digests_out = NULL;
    r = wsync_delta_encode(p->img, p->next, n, &d, wsync__getall_sink, delta, &ds, err);
    if (r != WSYNC_OK) return r;
    if (!d.result_digests_out &&
        (r = wsync__tensor_digests(p->next, n, p->o.threads, p->ndig, err)) != WSYNC_OK)
        return r;
    st->changed = ds.changed;
    *keep_delta = (double)delta->b.len <= p->o.anchor_fraction * (double)p->file_size;
    if (!*keep_delta) *want_anchor = 1;
    st->base_step = p->image_step;
    return WSYNC_OK;
}

/* wsync_publish: the step's objects (the delta when kept, the anchor when
   due: one object, or a directory's), their entries in de and ae. */
static wsync_result wsync__pub_objects(wsync_publisher *p, uint64_t step, const wsync__getall *delta, int keep_delta,
                                       int want_anchor, uint64_t state, wsync_chain_entry *ae, wsync_chain_entry *de,
                                       wsync_chain_file **afiles, wsync_publish_stats *st, wsync_error *err)
{
    wsync_result r;
    memset(ae, 0, sizeof *ae);
    memset(de, 0, sizeof *de);
    if (keep_delta) {
        de->kind = WSYNC_CHAIN_DELTA;
        de->step = step;
        de->base = st->base_step;
        de->bytes = delta->b.len;
        de->has_digests = 1;
        de->digest = wsync_digest(delta->b.p, delta->b.len);
        de->state = state;
        de->encoding = p->o.encoding;
        wsync__entry_key(de);
        if (p->signing) {
            wsync_blake2b(delta->b.p, delta->b.len, de->hash, WSYNC_CHAIN_HASH_SIZE);
            de->has_hash = 1;
        }
        if ((r = wsync__pub_put(p, de, delta->b.p, delta->b.len, err)) != WSYNC_OK) return r;
        st->wrote_delta = 1;
        st->delta_bytes = delta->b.len;
    }
    if (want_anchor && p->n_shards) {
        if ((r = wsync__pub_put_dir(p, step, ae, afiles, err)) != WSYNC_OK) return r;
        ae->state = state;
        st->wrote_anchor = 1;
        st->anchor_bytes = ae->bytes;
    } else if (want_anchor) {
        ae->kind = WSYNC_CHAIN_ANCHOR;
        ae->step = ae->base = step;
        ae->bytes = p->file_size;
        ae->has_digests = 1;
        ae->digest = wsync_digest(p->file, (size_t)p->file_size);
        ae->state = state;
        wsync__entry_key(ae);
        if (p->signing) {
            wsync__hashjob hj;
            wsync__hash_start(&hj, p->file, (size_t)p->file_size);
            r = wsync__pub_put(p, ae, p->file, (size_t)p->file_size, err);
            wsync__hash_finish(&hj, ae->hash);
            ae->has_hash = 1;
        } else {
            r = wsync__pub_put(p, ae, p->file, (size_t)p->file_size, err);
        }
        if (r != WSYNC_OK) return r;
        st->wrote_anchor = 1;
        st->anchor_bytes = p->file_size;
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_publish(wsync_publisher *p, uint64_t step, const wsync_tensor *tensors, size_t n,
                                     wsync_publish_stats *stats, wsync_error *err)
{
    wsync_publish_stats st;
    wsync__getall delta;
    wsync_allocator pool_a; /* p->pool's, for the encode and the delta's buffer */
    wsync_chain_info ni;
    wsync_chain_entry ae, de;
    wsync_chain_entry *gone = NULL;
    wsync_chain_file *afiles = NULL; /* a directory anchor's objects, until ni owns copies */
    size_t i, k, n_gone = 0;
    int want_anchor, keep_delta = 0, encoded = 0;
    uint64_t state = 0;
    double t0 = wsync__wall(), t1;
    wsync_result r;

    wsync__error_reset(err);
    if (!p) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no publisher");
    memset(&st, 0, sizeof st);
    memset(&delta, 0, sizeof delta);
    memset(&ni, 0, sizeof ni);
    delta.b.a = &p->a;
    if (!n) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no tensors to publish");
    if ((r = wsync__check_tensors(tensors, n, err)) != WSYNC_OK) return r;
    if (step > WSYNC_STEP_MAX)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "step %llu above the limit",
                           (unsigned long long)step);
    if (p->has_info && step <= p->info.head_step)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           "step %llu is not after HEAD's step %llu: publish a step after %llu "
                           "(wsync_publisher_head, or wsync log, gives HEAD's step), or start over under a new "
                           "prefix or in an empty store", (unsigned long long)step,
                           (unsigned long long)p->info.head_step, (unsigned long long)p->info.head_step);
    if (p->has_floor && step <= p->floor)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           "step %llu is not after step %llu, the newest in the store: a new chain keeps the "
                           "objects there and publishes only steps after them", (unsigned long long)step,
                           (unsigned long long)p->floor);
    st.step = step;
    if (p->n_shards && p->shards[p->n_shards - 1].first + p->shards[p->n_shards - 1].count != n)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                           "the layout's shards hold %llu tensors, and %llu are published",
                           (unsigned long long)(p->shards[p->n_shards - 1].first + p->shards[p->n_shards - 1].count),
                           (unsigned long long)n);
    if ((r = wsync__pub_view(p, tensors, n, err)) != WSYNC_OK) return r;
    for (i = 0; i < n; i++) st.elements += p->next[i].nbytes * 8 / wsync_dtype_bits(p->next[i].dtype);

    if (p->has_image && (p->n != n || !wsync__same_layout(p->img, p->next, n))) p->has_image = 0;
    if (!p->has_image && p->has_info) wsync__pub_restore(p, p->next, n);
    want_anchor = !p->has_image || !p->has_info || step - p->info.anchor_step >= p->o.anchor_every ||
                  wsync__pub_layout_differs(p);

    /* the delta against the last published image */
    if (p->has_image) {
        if ((r = wsync__pub_encode(p, step, n, &delta, &pool_a, &st, &keep_delta, &want_anchor, err)) != WSYNC_OK)
            goto fail;
        encoded = 1;
    }

    /* the image becomes this step's: the encode updated it in place */
    if (!encoded) {
        if ((r = wsync__pub_layout(p, p->next, n, step, err)) != WSYNC_OK) goto fail;
        for (i = 0; i < n; i++)
            if (p->next[i].nbytes) memcpy(p->img[i].data, p->next[i].data, (size_t)p->next[i].nbytes);
        if ((r = wsync__tensor_digests(p->img, n, p->o.threads, p->dig, err)) != WSYNC_OK) goto fail;
    } else {
        memcpy(p->dig, p->ndig, n * sizeof *p->dig);
        if ((r = wsync__pub_restep(p, step, err)) != WSYNC_OK) goto fail;
    }
    p->has_image = 1;
    p->image_step = step;
    if ((r = wsync__state_of(p->img, p->dig, n, &p->a, &state, err)) != WSYNC_OK) goto fail;
    st.state = state;
    t1 = wsync__wall();
    st.encode_seconds = t1 - t0;

    /* objects, then HEAD, then retention */
    if ((r = wsync__pub_objects(p, step, &delta, keep_delta, want_anchor, state, &ae, &de, &afiles, &st, err)) !=
        WSYNC_OK)
        goto fail;
    {
        size_t cap = (p->has_info ? p->info.n_entries : 0) + 2;
        uint64_t anchor = want_anchor ? step : p->info.anchor_step;
        uint64_t keep_from = step >= p->o.retain ? step - p->o.retain + 1 : 0;
        ni.allocator = p->a;
        ni.has_head = 1;
        ni.head_step = step;
        ni.anchor_step = anchor;
        ni.head_state = state;
        ni.encoding = p->o.encoding;
        ni.has_id = p->signing;
        memcpy(ni.id, p->id, sizeof ni.id);
        ni.entries = (wsync_chain_entry *)wsync__alloc(&p->a, cap * sizeof *ni.entries);
        gone = (wsync_chain_entry *)wsync__alloc(&p->a, cap * sizeof *gone);
        if (!ni.entries || !gone) {
            r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "HEAD");
            goto fail;
        }
        k = 0;
        for (i = 0; p->has_info && i < p->info.n_entries; i++) {
            const wsync_chain_entry *e = &p->info.entries[i];
            if (e->step >= keep_from || e->step >= anchor) ni.entries[k++] = *e;
            else gone[n_gone++] = *e;
        }
        if (want_anchor) ni.entries[k++] = ae;
        if (keep_delta) ni.entries[k++] = de;
        ni.n_entries = k;
        if (!p->store.del) { /* it keeps them all: HEAD goes on naming them */
            st.retention_failed = wsync__pub_collect(p, &ni, gone, n_gone, &st.deleted);
            n_gone = 0;
        }
        qsort(ni.entries, ni.n_entries, sizeof *ni.entries, wsync__cmp_entry);
    }
    if ((r = wsync__info_own_files(&ni, err)) != WSYNC_OK) goto fail;
    if ((r = wsync__pub_head(p, &ni, err)) != WSYNC_OK) goto fail;
    if (n_gone) {
        /* deleted only once HEAD no longer names them; any left named again
           (if that HEAD fails, the next publish still tries them) */
        uint64_t failed = wsync__pub_collect(p, &ni, gone, n_gone, &st.deleted);
        st.retention_failed += failed;
        if (failed) {
            /* those entries' files are still p->info's: ni takes copies */
            if ((r = wsync__info_own_files(&ni, err)) != WSYNC_OK) goto fail;
            wsync__pub_head(p, &ni, NULL);
        }
    }
    wsync__free(&p->a, afiles);
    wsync_chain_info_free(&p->info);
    p->info = ni;
    p->has_info = 1;
    st.put_seconds = wsync__wall() - t1;
    wsync__free(&p->a, gone);
    wsync__buf_free(&delta.b);
    if (stats) *stats = st;
    return WSYNC_OK;
fail:
    /* HEAD still names the previous step; the image may not be it any more,
       so the next publish rebuilds it from the store */
    p->has_image = 0;
    wsync__free(&p->a, afiles);
    wsync__free(&p->a, gone);
    wsync_chain_info_free(&ni);
    wsync__buf_free(&delta.b);
    if (stats) *stats = st;
    return r;
}

#endif /* WSYNC_NO_ENCODE */

/* ======================================================================
   Subscriber  >>subscriber
   ====================================================================== */

typedef struct wsync__fetched {
    wsync_chain_entry e;
    uint8_t *bytes;
    uint64_t size;
    int fd;            /* an anchor spooled (bytes NULL): its open, unlinked file; else -1 */
    wsync_chain_file *files; /* a directory anchor: e.files, copied from the poll's chain */
} wsync__fetched;

/* An object refused (its check or its apply failed): not fetched again by
   the prefetch while the chain gives its key the same size and digest. */
typedef struct wsync__refusal {
    char key[64];
    uint64_t size;
    int has_digest;
    uint64_t digest;
} wsync__refusal;

#define WSYNC__MAX_REFUSED 64
#define WSYNC__MAX_BACKOFF 6 /* the poll interval grows to at most 64 times... */
#define WSYNC__BACKOFF_CAP_MS 60000u /* ...and a minute */

struct wsync_subscriber {
    wsync_store store;
    wsync_chain_options o;
    wsync_allocator a;
    /* the applies' memory, kept from one to the next (at most an eighth of
       the model's bytes and 16 MiB); NULL if it could not be made: then a */
    wsync_pool *pool;
    char prefix[WSYNC__PREFIX_MAX];
    wsync_tensor *t;
    size_t n;
    wsync_tensor **sorted; /* the targets by name (layout checks) */
    size_t *alias;     /* alias[i]: the first target sharing i's memory (tied weights), or i */
    int has_alias;
    int partial;       /* WSYNC_CHAIN_PARTIAL */
    int has_step;
    uint64_t step;
    int verified;      /* the step was reached by a digest-checked apply here, not vouched for */
    int verify_state;
    char *spool_dir;   /* wsync_chain_options.spool_dir, copied; NULL: $TMPDIR or /tmp */
    unsigned spool_seq; /* spool files made (under mu): their names */
    /* background prefetch */
    int bg_running, bg_stop;
    unsigned interval_ms;
    wsync__fetched *pre;
    size_t n_pre;
    int pre_ready, pre_has_from, pre_verified;
    int pre_restart;   /* the prefetch leads to a restarted chain's step (WSYNC_CHAIN_FOLLOW_RESTART) */
    uint64_t pre_from, pre_step, pre_head;
    int busy;          /* a sync or apply_ready is moving the targets: the prefetch waits */
    /* what wsync_subscriber_prefetch_status reports (under mu) */
    uint64_t polls;
    int head_known;
    uint64_t head_step;
    unsigned backoff;  /* the interval is interval_ms << backoff */
    wsync_result last_result;
    wsync_error last_err;
    double last_time;
    wsync__refusal refused[WSYNC__MAX_REFUSED];
    size_t n_refused;
#if WSYNC__HAVE_THREADS
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
    /* wsync_subscriber_on_changes (the mirror section): every apply's changes */
    wsync_changes_fn chg_fn;
    void *chg_user;
    uint32_t chg_chunk;
    unsigned chg_flags;
    /* the state digest the last check computed (wsync__sub_verify_entry) */
    int state_known;
    uint64_t state_step, state_digest;
    /* signed chains: wsync_chain_options.verify_key, copied (o.verify_key
       points here), and the identity of the chain followed (under mu) */
    int verifying;
    uint8_t vkey[WSYNC_ED25519_PUBLIC_SIZE];
    int has_chain_id;
    uint8_t chain_id[WSYNC_CHAIN_ID_SIZE];
};

static wsync_result wsync__sub_changes_whole(wsync_subscriber *s, wsync_error *err);

WSYNC_DEF wsync_result wsync_subscriber_open(const wsync_store *store, wsync_tensor *targets, size_t n,
                                             const wsync_chain_options *opt, wsync_subscriber **out,
                                             wsync_error *err)
{
    wsync_subscriber *s;
    wsync_allocator a;
    wsync_result r;
    char prefix[WSYNC__PREFIX_MAX];
    wsync__error_reset(err);
    if (!store || !out || !store->get)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_subscriber_open arguments");
    *out = NULL;
    if ((r = wsync__check_tensors(targets, n, err)) != WSYNC_OK) return r;
    if ((r = wsync__chain_prefix(prefix, opt ? opt->prefix : NULL, err)) != WSYNC_OK) return r;
    memset(&a, 0, sizeof a);
    if (opt) a = opt->allocator;
    if (!(s = (wsync_subscriber *)wsync__alloc(&a, sizeof *s)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "subscriber");
    memset(s, 0, sizeof *s);
    s->store = *store;
    if (opt) s->o = *opt;
    s->o.prefix = NULL;
    s->a = a;
    memcpy(s->prefix, prefix, sizeof prefix);
    s->verify_state = (s->o.flags & WSYNC_CHAIN_VERIFY_STATE) != 0;
    s->o.spool_dir = NULL;
    s->o.sign_key = NULL;
    if (s->o.verify_key) {
        memcpy(s->vkey, s->o.verify_key, sizeof s->vkey);
        s->o.verify_key = s->vkey;
        s->verifying = 1;
    }
    if (opt && opt->spool_dir && *opt->spool_dir) {
        size_t len = strlen(opt->spool_dir);
        if (!(s->spool_dir = (char *)wsync__alloc(&a, len + 1))) {
            wsync__free(&a, s);
            return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "subscriber");
        }
        memcpy(s->spool_dir, opt->spool_dir, len + 1);
    }
    if (!(s->t = (wsync_tensor *)wsync__alloc(&a, n * sizeof *s->t + 1))) {
        wsync__free(&a, s->spool_dir);
        wsync__free(&a, s);
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "subscriber");
    }
    if (n) memcpy(s->t, targets, n * sizeof *s->t);
    s->n = n;
    s->partial = (s->o.flags & WSYNC_CHAIN_PARTIAL) != 0;
    s->sorted = (wsync_tensor **)wsync__alloc(&a, n * sizeof *s->sorted + 1);
    s->alias = (size_t *)wsync__alloc(&a, n * sizeof *s->alias + 1);
    if (!s->sorted || !s->alias) r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "subscriber");
    else r = wsync__aliases(s->t, n, &a, s->alias, &s->has_alias, err);
    if (r == WSYNC_OK) {
        size_t i;
        for (i = 0; i < n; i++) s->sorted[i] = &s->t[i];
        qsort(s->sorted, n, sizeof *s->sorted, wsync__cmp_tensor_ptr_names);
        for (i = 1; i < n && r == WSYNC_OK; i++)
            if (strcmp(s->sorted[i - 1]->name, s->sorted[i]->name) == 0)
                r = wsync__fail(err, WSYNC_ERR_DUPLICATE_KEY, UINT64_MAX, s->sorted[i]->name,
                                strlen(s->sorted[i]->name), "%s", "two targets have this name");
    }
    if (r != WSYNC_OK) {
        wsync__free(&a, s->sorted);
        wsync__free(&a, s->alias);
        wsync__free(&a, s->t);
        wsync__free(&a, s->spool_dir);
        wsync__free(&a, s);
        return r;
    }
    s->pool = wsync_pool_new(wsync__pool_keep(targets, n), &a);
#if WSYNC__HAVE_THREADS
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
#endif
    *out = s;
    return WSYNC_OK;
}

WSYNC_DEF void wsync_subscriber_set_step(wsync_subscriber *s, uint64_t step)
{
    if (!s) return;
    WSYNC__LOCK(&s->mu);
    s->has_step = 1;
    s->step = step;
    s->verified = 0;
    WSYNC__UNLOCK(&s->mu);
}

WSYNC_DEF int wsync_subscriber_chain_id(const wsync_subscriber *s, uint8_t id[16])
{
    int has;
    if (!s) return 0;
    WSYNC__LOCK(&((wsync_subscriber *)s)->mu);
    has = s->has_chain_id;
    if (has && id) memcpy(id, s->chain_id, WSYNC_CHAIN_ID_SIZE);
    WSYNC__UNLOCK(&((wsync_subscriber *)s)->mu);
    return has;
}

WSYNC_DEF void wsync_subscriber_set_chain_id(wsync_subscriber *s, const uint8_t id[16])
{
    if (!s) return;
    WSYNC__LOCK(&s->mu);
    s->has_chain_id = id != NULL;
    if (id) memcpy(s->chain_id, id, WSYNC_CHAIN_ID_SIZE);
    WSYNC__UNLOCK(&s->mu);
}

WSYNC_DEF int wsync_subscriber_step(const wsync_subscriber *s, uint64_t *step)
{
    int has;
    if (!s) return 0;
    WSYNC__LOCK(&((wsync_subscriber *)s)->mu);
    has = s->has_step;
    if (has && step) *step = s->step;
    WSYNC__UNLOCK(&((wsync_subscriber *)s)->mu);
    return has;
}

static void wsync__sub_moved(wsync_subscriber *s, int has, uint64_t step, int verified)
{
    WSYNC__LOCK(&s->mu);
    s->has_step = has;
    s->step = step;
    s->verified = verified;
    WSYNC__UNLOCK(&s->mu);
}

static int wsync__sub_refusal_is(const wsync__refusal *f, const wsync_chain_entry *e)
{
    return strcmp(f->key, e->key) == 0 && f->size == e->bytes &&
           (!f->has_digest || !e->has_digests || f->digest == e->digest);
}

/* Remembers a refused object (the oldest refusal goes when there are too many). */
static void wsync__sub_refuse(wsync_subscriber *s, const wsync_chain_entry *e)
{
    wsync__refusal *f;
    size_t i;
    WSYNC__LOCK(&s->mu);
    for (i = 0; i < s->n_refused; i++)
        if (wsync__sub_refusal_is(&s->refused[i], e)) break;
    if (i == s->n_refused) {
        if (s->n_refused == WSYNC__MAX_REFUSED) {
            memmove(s->refused, s->refused + 1, (WSYNC__MAX_REFUSED - 1) * sizeof *s->refused);
            s->n_refused--;
        }
        f = &s->refused[s->n_refused++];
        memcpy(f->key, e->key, sizeof f->key);
        f->size = e->bytes;
        f->has_digest = e->has_digests;
        f->digest = e->digest;
    }
    WSYNC__UNLOCK(&s->mu);
}

/* An object applied after all (a sync, after the store repaired it). */
static void wsync__sub_unrefuse(wsync_subscriber *s, const wsync_chain_entry *e)
{
    size_t i = 0;
    WSYNC__LOCK(&s->mu);
    while (i < s->n_refused) {
        if (strcmp(s->refused[i].key, e->key) == 0) s->refused[i] = s->refused[--s->n_refused];
        else i++;
    }
    WSYNC__UNLOCK(&s->mu);
}

/* The prefetch's last failure, for wsync_subscriber_prefetch_status. */
static void wsync__sub_note_failure(wsync_subscriber *s, wsync_result r, const wsync_error *err)
{
    WSYNC__LOCK(&s->mu);
    s->last_result = r;
    if (err) s->last_err = *err;
    else {
        wsync__error_reset(&s->last_err);
        s->last_err.code = r;
    }
#if WSYNC__POSIX
    s->last_time = wsync__wall();
#else
    s->last_time = (double)time(NULL);
#endif
    WSYNC__UNLOCK(&s->mu);
}

static void wsync__sub_head_seen(wsync_subscriber *s, int known, uint64_t step)
{
    WSYNC__LOCK(&s->mu);
    s->head_known = known;
    if (known) s->head_step = step;
    WSYNC__UNLOCK(&s->mu);
}

/* Failures of the store or of this machine, not of the object. */
static int wsync__sub_not_the_object(wsync_result r)
{
    /* an AUTH refusal is the store's (a token that expired, a 403 from a
       proxy): the object is asked for again at the next poll, as for a 503;
       LAYOUT is the engine's model, never the object's */
    return r == WSYNC_ERR_OUT_OF_MEMORY || r == WSYNC_ERR_IO || r == WSYNC_ERR_INVALID_ARGUMENT ||
           r == WSYNC_ERR_UNSUPPORTED || r == WSYNC_ERR_SINK || r == WSYNC_ERR_AUTH || r == WSYNC_ERR_NO_STORE ||
           r == WSYNC_ERR_LAYOUT || r == WSYNC_ERR_STALE_HEAD;
}

/* ---- the subscriber's path planning >>sub-plan ---- */

/* The cheapest path to `target` avoiding `bad` objects: entry indices in
   apply order into path (room for n_entries). 0 when there is none. */
static int wsync__sub_walk(const wsync_chain_info *c, uint64_t from, uint64_t target, const long *bad, size_t nbad,
                       long *path, size_t *np, uint64_t *cost)
{
    uint64_t s = target, total = 0;
    size_t k = 0, i, j;
    while (s != from) {
        long di = wsync__chain_find(c, WSYNC_CHAIN_DELTA, s);
        if (di < 0 || k >= c->n_entries) return 0;
        for (j = 0; j < nbad; j++)
            if (bad[j] == di) return 0;
        path[k++] = di;
        total += c->entries[di].bytes;
        s = c->entries[di].base;
        if (s < from) return 0;
    }
    for (i = 0; i < k / 2; i++) {
        long t = path[i];
        path[i] = path[k - 1 - i];
        path[k - 1 - i] = t;
    }
    *np = k;
    *cost = total;
    return 1;
}

static int wsync__sub_plan(const wsync_chain_info *c, int has_cur, uint64_t cur, uint64_t target, const long *bad,
                       size_t nbad, long *path, size_t *np, long *tmp)
{
    uint64_t best = UINT64_MAX, cost;
    size_t n, i, j;
    int found = 0;
    if (has_cur && cur <= target && wsync__sub_walk(c, cur, target, bad, nbad, path, np, &cost)) {
        best = cost;
        found = 1;
    }
    /* the newest usable anchor at or before target, then its deltas */
    for (i = c->n_entries; i-- > 0;) {
        const wsync_chain_entry *e = &c->entries[i];
        int isbad = 0;
        if (e->kind != WSYNC_CHAIN_ANCHOR || e->step > target) continue;
        for (j = 0; j < nbad; j++)
            if (bad[j] == (long)i) isbad = 1;
        if (isbad) continue;
        if (wsync__sub_walk(c, e->step, target, bad, nbad, tmp + 1, &n, &cost)) {
            cost += e->bytes;
            if (!found || cost < best) {
                tmp[0] = (long)i;
                memcpy(path, tmp, (n + 1) * sizeof *path);
                *np = n + 1;
                found = 1;
            }
            break;
        }
    }
    return found;
}

static wsync_result wsync__sub_fetch(const wsync_subscriber *s, const wsync_chain_entry *e, uint8_t **bytes,
                                 uint64_t *size, wsync_error *err)
{
    char key[WSYNC__KEY_MAX];
    wsync_result r;
    if (e->n_files) /* streamed or spooled where POSIX files are (wsync__sub_anchor_read) */
        return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s",
                           "a directory anchor is read through a spool file, which this build has not (POSIX)");
    if (e->key[0] && e->key[strlen(e->key) - 1] == '/') /* from a listing: see wsync__listing_fn */
        return wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0, "%s",
                           "a model directory's anchor, which only a HEAD describes (its shards and their order): "
                           "not readable from a listing");
    wsync__chain_path(key, sizeof key, s->prefix, e->key);
    /* HEAD's size (or the listing's): a store that sends more is cut off
       there instead of filling memory; 0 from a listing is no size */
    if (e->has_digests || e->bytes)
        r = wsync_store_get_capped(&s->store, key, e->bytes, WSYNC_STORE_GET_EXACT, &s->a, bytes, size, err);
    else r = wsync_store_get_all(&s->store, key, &s->a, bytes, size, err);
    return r; /* the caller names the object */
}

/* An object's BLAKE2b-256 against the signed HEAD's (want NULL: HEAD
   named none, which a signed HEAD never does). */
static wsync_result wsync__sub_hash_check(const uint8_t *want, const uint8_t got[WSYNC_CHAIN_HASH_SIZE], wsync_error *err)
{
    if (!want)
        return wsync__fail(err, WSYNC_ERR_DIGEST_MISMATCH, UINT64_MAX, NULL, 0, "%s",
                           "the signed HEAD names no hash for it (a verify key is set)");
    if (memcmp(want, got, WSYNC_CHAIN_HASH_SIZE) != 0)
        return wsync__fail(err, WSYNC_ERR_DIGEST_MISMATCH, UINT64_MAX, NULL, 0, "%s",
                           "its BLAKE2b-256 does not match the signed HEAD's, though its size and digest do: "
                           "altered by someone who can write the store, not corrupt");
    return WSYNC_OK;
}

/* Checks that cost nothing but the bytes: size, digest, container, steps;
   with `hashed` (a verify key), the hash the signed HEAD names. */
static wsync_result wsync__sub_check_object(const wsync_chain_entry *e, const uint8_t *bytes, uint64_t size, int hashed,
                                        wsync_encoding *enc, wsync_error *err)
{
    wsync_result r;
    if (e->has_digests) {
        if (size != e->bytes)
            return wsync__fail(err, WSYNC_ERR_TRUNCATED, UINT64_MAX, NULL, 0,
                               "%llu bytes, HEAD says %llu (torn or truncated)", (unsigned long long)size,
                               (unsigned long long)e->bytes);
        if (wsync_digest(bytes, (size_t)size) != e->digest)
            return wsync__fail(err, WSYNC_ERR_DIGEST_MISMATCH, UINT64_MAX, NULL, 0, "%s",
                               "the digest of its bytes does not match HEAD (corrupt)");
    }
    if (hashed) {
        uint8_t h[WSYNC_CHAIN_HASH_SIZE];
        wsync_blake2b(bytes, (size_t)size, h, sizeof h);
        if ((r = wsync__sub_hash_check(e->has_hash ? e->hash : NULL, h, err)) != WSYNC_OK) return r;
    }
    if (e->kind == WSYNC_CHAIN_DELTA) {
        wsync_delta_stats ds;
        if ((r = wsync_delta_info(bytes, size, &ds, err)) != WSYNC_OK) return r;
        if (enc) *enc = ds.encoding;
        if (ds.has_steps && ds.step != e->step)
            return wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0, "holds step %llu, not %llu (out of order)",
                               (unsigned long long)ds.step, (unsigned long long)e->step);
        /* Without HEAD, e->base is only the previous listed step: a delta
           missing in between must not let the next one patch the wrong base
           (trl's apply cannot see it). A delta that carries its base is
           held to it; one that does not cannot be verified, and is followed
           only from the step just before it. */
        if (ds.has_base && ds.base_step != e->base)
            return wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0, "applies to step %llu, %s %llu",
                               (unsigned long long)ds.base_step,
                               e->has_digests ? "HEAD says" : "but the step before it in the listing is",
                               (unsigned long long)e->base);
        if (!ds.has_base && !e->has_digests && (e->step == 0 || e->base != e->step - 1))
            return wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0,
                               "carries no base step and step %llu is missing from the listing: cannot tell what "
                               "it applies to (without HEAD such a chain cannot be verified)",
                               (unsigned long long)(e->step ? e->step - 1 : 0));
    }
    return WSYNC_OK;
}

/* An anchor's header (or a directory anchor's shard, with `covered`)
   against the targets: no name holding U+0000, its "step" (when present)
   e's, and each target it holds (matched by name) with the target's dtype
   and shape. map[i] gets the index in f->tensors of target i's. Without
   covered every target must be in it; with covered (a shard) a target it
   lacks gets SIZE_MAX, and one a shard before held (covered) fails.
   Tensors no target names are ignored. */
static wsync_result wsync__sub_anchor_match(const wsync_subscriber *s, const wsync_chain_entry *e, const wsync_st_file *f,
                                        uint8_t *covered, size_t *map, wsync_error *err)
{
    const char *ms;
    size_t i;
    wsync_result r;
    /* a target named "a" must not take the anchor's "a\u0000x" (nor the
       other way round, for targets whose names were read from a file) */
    if ((r = wsync_st_check_names(f, err)) != WSYNC_OK) return r;
    ms = wsync_st_metadata_get(f, "step");
    if (ms) {
        char *end;
        unsigned long long v = strtoull(ms, &end, 10);
        if (*ms < '0' || *ms > '9' || *end || v != e->step)
            return wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0, "its metadata says step '%.20s', not %llu",
                               ms, (unsigned long long)e->step);
    }
    for (i = 0; i < s->n; i++) {
        const wsync_tensor *t = &s->t[i];
        const wsync_st_tensor *a = wsync_st_find(f, t->name);
        int same;
        uint32_t k;
        map[i] = SIZE_MAX;
        if (!a && covered) continue; /* in another shard */
        same = a && a->dtype == t->dtype && a->rank == t->rank && a->end - a->begin == t->nbytes;
        for (k = 0; same && k < t->rank; k++) same = a->shape[k] == t->shape[k];
        if (!a)
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, t->name, strlen(t->name),
                               "the chain has no tensor of this name (anchor %llu lacks it): the model does not "
                               "match the chain",
                               (unsigned long long)e->step);
        if (!same) {
            char want[128], have[128];
            wsync__shape_str(want, sizeof want, a->dtype, a->rank, a->shape, NULL);
            wsync__shape_str(have, sizeof have, t->dtype, t->rank, t->shape, NULL);
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, t->name, strlen(t->name),
                               "the chain has %s, the target is %s (the model does not match the chain)", want,
                               have);
        }
        if (covered) {
            if (covered[i])
                return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, UINT64_MAX, t->name, strlen(t->name), "%s",
                                   "in two shards of the anchor");
            covered[i] = 1;
        }
        map[i] = (size_t)(a - f->tensors);
    }
    /* the chain's tensors that no target holds: only an engine that said
       it holds part of the model (WSYNC_CHAIN_PARTIAL) may leave them */
    if (!s->partial) {
        size_t matched = 0;
        for (i = 0; i < s->n; i++) matched += map[i] != SIZE_MAX;
        if (matched != f->n_tensors)
            for (i = 0; i < f->n_tensors; i++) {
                const wsync_st_tensor *a = &f->tensors[i];
                if (!wsync__target_find(s->sorted, s->n, a->name, a->name_len)) {
                    char have[128];
                    wsync__shape_str(have, sizeof have, a->dtype, a->rank, a->shape, NULL);
                    return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, a->name, a->name_len,
                                       "the chain has this tensor (%s, anchor %llu) and no target does; an engine "
                                       "that holds part of the model says so (WSYNC_CHAIN_PARTIAL)",
                                       have, (unsigned long long)e->step);
                }
            }
    }
    return WSYNC_OK;
}

/* Every target in some shard of a directory anchor. */
static wsync_result wsync__sub_anchor_covered(const wsync_subscriber *s, const uint8_t *covered, wsync_error *err)
{
    size_t i;
    for (i = 0; i < s->n; i++)
        if (!covered[i])
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, s->t[i].name, strlen(s->t[i].name), "%s",
                               "the chain has no tensor of this name (in no shard of its anchor): the model does "
                               "not match the chain");
    return WSYNC_OK;
}

/* Target i shares target alias[i]'s memory (tied) and the chain holds
   other bytes under its name. */
static wsync_result wsync__sub_tied_differ(const wsync_subscriber *s, size_t i, wsync_error *err)
{
    return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, s->t[i].name, strlen(s->t[i].name),
                       "shares its memory with target '%.100s' (tied), but the chain's anchor holds different "
                       "bytes under the two names: the model does not match the chain",
                       s->t[s->alias[i]].name);
}

/* An anchor held whole in memory (no POSIX files, or a size unknown). */
static wsync_result wsync__sub_apply_anchor(wsync_subscriber *s, const wsync_chain_entry *e, const uint8_t *bytes,
                                        uint64_t size, wsync_error *err)
{
    wsync_st_file f;
    wsync_st_options so;
    const void **src;
    size_t *map;
    wsync__copyjob j;
    size_t i;
    wsync_result r;
    memset(&so, 0, sizeof so);
    so.allocator = s->a;
    if ((r = wsync_st_parse(bytes, size, &so, &f, err)) != WSYNC_OK) return r;
    src = (const void **)wsync__alloc(&s->a, s->n * sizeof *src + 1);
    map = (size_t *)wsync__alloc(&s->a, s->n * sizeof *map + 1);
    if (!src || !map) r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor");
    else r = wsync__sub_anchor_match(s, e, &f, NULL, map, err);
    if (r == WSYNC_OK) {
        for (i = 0; i < s->n; i++) src[i] = f.tensors[map[i]].data;
        /* a tied name: the anchor must hold the same bytes under both, written once */
        for (i = 0; i < s->n && r == WSYNC_OK; i++)
            if (s->alias[i] != i) {
                if (s->t[i].nbytes && memcmp(src[i], src[s->alias[i]], (size_t)s->t[i].nbytes) != 0)
                    r = wsync__sub_tied_differ(s, i, err);
                src[i] = NULL;
            }
    }
    if (r == WSYNC_OK) {
        /* everything checked: only now the targets change */
        j.dst = s->t;
        j.src = src;
        r = wsync__workers_do(s->o.threads, s->n, wsync__copy_item, &j, err);
    }
    wsync__free(&s->a, (void *)src);
    wsync__free(&s->a, map);
    wsync_st_free(&f);
    return r;
}

/* ---- anchors in bounded memory: streamed into the targets, or spooled ----
   An anchor is as large as the model, so it is never held in memory (see
   wsync_subscriber_open): into targets without a step it streams as it
   arrives (its header first, matched against them, the digest at the end);
   for targets with a step it goes to an unlinked spool file, is checked on
   the way, and only a good one is read from the file into them. */

#if WSYNC__POSIX
#define WSYNC__SPOOLS 1

/* An anchor of known size (HEAD's, or a listing's) is streamed or spooled. */
static int wsync__sub_anchor_streams(const wsync_chain_entry *e)
{
    return e->kind == WSYNC_CHAIN_ANCHOR && (e->has_digests || e->bytes);
}

static int wsync__write_all(int fd, const uint8_t *p, size_t len)
{
    while (len) {
        ssize_t w = write(fd, p, len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return 0;
        p += w;
        len -= (size_t)w;
    }
    return 1;
}

/* 1: len bytes read; 0: an error (errno) or the file ended first (errno 0). */
static int wsync__read_all(int fd, uint8_t *p, uint64_t len)
{
    while (len) {
        ssize_t n = read(fd, p, len > ((uint64_t)1 << 30) ? ((size_t)1 << 30) : (size_t)len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = 0;
            return 0;
        }
        p += n;
        len -= (uint64_t)n;
    }
    return 1;
}

/* A new spool file in *fd, opened read-write and already unlinked. */
static wsync_result wsync__sub_spool_open(wsync_subscriber *s, int *fd_out, wsync_error *err)
{
    const char *dir = s->spool_dir;
    char path[4096];
    unsigned attempt;
    if (!dir || !*dir) dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    for (attempt = 0; attempt < 64; attempt++) {
        unsigned seq;
        int fd, n;
        WSYNC__LOCK(&s->mu);
        seq = ++s->spool_seq;
        WSYNC__UNLOCK(&s->mu);
        n = snprintf(path, sizeof path, "%s/wsync-spool.%ld.%lx.%u", dir, (long)getpid(),
                     (unsigned long)(uintptr_t)s, seq);
        if (n < 0 || (size_t)n >= sizeof path)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                               "the spool directory '%.200s...' is too long", dir);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
            if (unlink(path) != 0) {
                wsync_result r = wsync__io_fail(err, "cannot unlink the spool file", path, 0);
                close(fd);
                return r;
            }
            *fd_out = fd;
            return WSYNC_OK;
        }
        if (errno != EEXIST)
            return wsync__io_fail(err,
                                  "cannot create the spool file (wsync_chain_options.spool_dir, else $TMPDIR or /tmp)",
                                  path, 0);
    }
    return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0,
                       "cannot create a spool file in '%.200s': every name tried exists", dir);
}

/* A signed anchor's hash beside its download: the stream's sink copies
   each piece into one of four 4 MiB slots and a thread of its own hashes
   the slots in order, so the download (and the copy into the targets or
   the spool) goes on while BLAKE2b runs (about 0.9 GB/s with AVX2, slower
   than a local read: BENCHMARKS.md, "Signed chains"). Anchors of 16 MiB
   and up, where threads are; the hash is the same as in one call. */
#define WSYNC__HPIPE_SLOTS 4u
#define WSYNC__HPIPE_SLOT ((size_t)4 << 20)
typedef struct wsync__hpipe {
    wsync_blake2b_state hs;       /* the hasher thread's until the join */
    uint8_t *mem;                 /* SLOTS * SLOT bytes */
    size_t len[WSYNC__HPIPE_SLOTS];
    int full[WSYNC__HPIPE_SLOTS]; /* handed to the hasher, not hashed yet (under mu) */
    unsigned put, take;           /* the slot being filled; the slot hashed next */
    int have;                     /* the producer holds slot put (free, being filled) */
    int done;                     /* no more slots come (under mu) */
#if WSYNC__HAVE_THREADS
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
#endif
    wsync_allocator a;
} wsync__hpipe;

#if WSYNC__HAVE_THREADS
static void *wsync__hpipe_main(void *arg)
{
    wsync__hpipe *h = (wsync__hpipe *)arg;
    for (;;) {
        unsigned k;
        pthread_mutex_lock(&h->mu);
        while (!h->full[h->take % WSYNC__HPIPE_SLOTS] && !h->done) pthread_cond_wait(&h->cv, &h->mu);
        k = h->take % WSYNC__HPIPE_SLOTS;
        if (!h->full[k]) { /* done, and every slot handed over is hashed */
            pthread_mutex_unlock(&h->mu);
            return NULL;
        }
        pthread_mutex_unlock(&h->mu);
        wsync_blake2b_update(&h->hs, h->mem + (size_t)k * WSYNC__HPIPE_SLOT, h->len[k]);
        pthread_mutex_lock(&h->mu);
        h->full[k] = 0;
        h->take++;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
}
#endif

/* A pipe hashing with BLAKE2b-256, or NULL (no threads, no memory: the
   caller hashes in its own thread). */
static wsync__hpipe *wsync__hpipe_start(const wsync_allocator *a)
{
#if WSYNC__HAVE_THREADS
    wsync__hpipe *h = (wsync__hpipe *)wsync__alloc(a, sizeof *h);
    if (!h) return NULL;
    memset(h, 0, sizeof *h);
    h->a = *a;
    if (!(h->mem = (uint8_t *)wsync__alloc(a, WSYNC__HPIPE_SLOTS * WSYNC__HPIPE_SLOT))) {
        wsync__free(a, h);
        return NULL;
    }
    wsync_blake2b_init(&h->hs, WSYNC_CHAIN_HASH_SIZE);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->th, NULL, wsync__hpipe_main, h) != 0) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        wsync__free(a, h->mem);
        wsync__free(a, h);
        return NULL;
    }
    return h;
#else
    (void)a;
    return NULL;
#endif
}

#if WSYNC__HAVE_THREADS
static void wsync__hpipe_feed(wsync__hpipe *h, const uint8_t *p, size_t n)
{
    while (n) {
        unsigned k = h->put % WSYNC__HPIPE_SLOTS;
        size_t take;
        if (!h->have) { /* the next slot, once the hasher is done with it */
            pthread_mutex_lock(&h->mu);
            while (h->full[k]) pthread_cond_wait(&h->cv, &h->mu);
            pthread_mutex_unlock(&h->mu);
            h->len[k] = 0;
            h->have = 1;
        }
        take = WSYNC__HPIPE_SLOT - h->len[k] < n ? WSYNC__HPIPE_SLOT - h->len[k] : n;
        memcpy(h->mem + (size_t)k * WSYNC__HPIPE_SLOT + h->len[k], p, take);
        h->len[k] += take, p += take, n -= take;
        if (h->len[k] == WSYNC__HPIPE_SLOT) {
            pthread_mutex_lock(&h->mu);
            h->full[k] = 1;
            h->put++;
            pthread_cond_broadcast(&h->cv);
            pthread_mutex_unlock(&h->mu);
            h->have = 0;
        }
    }
}
#endif

/* Hands over what is left, waits for the hash, frees the pipe. */
static void wsync__hpipe_end(wsync__hpipe *h, uint8_t out[WSYNC_CHAIN_HASH_SIZE])
{
#if WSYNC__HAVE_THREADS
    wsync_allocator a = h->a;
    pthread_mutex_lock(&h->mu);
    if (h->have && h->len[h->put % WSYNC__HPIPE_SLOTS]) {
        h->full[h->put % WSYNC__HPIPE_SLOTS] = 1;
        h->put++;
    }
    h->done = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);
    wsync_blake2b_final(&h->hs, out);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    wsync__free(&a, h->mem);
    wsync__free(&a, h);
#else
    (void)h;
    (void)out;
#endif
}

/* An anchor arriving from the store: every byte to the digest, and either
   to the spool file or (fd -1) through its header into the targets. */
typedef struct wsync__astream {
    wsync_subscriber *s;
    const wsync_chain_entry *e;
    uint64_t expect, pos;     /* the object's size, bytes received */
    wsync_digest_state ds;
    int hashing;              /* a verify key: BLAKE2b-256 of every byte too */
    wsync_blake2b_state hs;   /* ... here, or (large anchors) in hp */
    wsync__hpipe *hp;
    int fd;                   /* the spool file; -1: straight into the targets */
    uint8_t *hdr;             /* the 8-byte length and the header, as they come */
    uint64_t hend;            /* 8 + the header's length, once known (else 0) */
    int parsed;               /* the header is in f and matched */
    wsync_st_file f;
    uint8_t **dst;            /* per tensor of f: its target's bytes, or NULL */
    size_t ti;                /* the tensor whose bytes come next */
    int touched;              /* a target byte was written */
    uint8_t *covered;         /* a directory anchor's shard: the targets found so far */
    wsync_result bad;         /* the object's first fault: only the digest goes on */
    wsync_error bad_err;
    wsync_result fatal;       /* the read stopped (no object fault): spool, memory, length */
    wsync_error fatal_err;
} wsync__astream;

static void wsync__astream_parse(wsync__astream *a)
{
    wsync_st_options so;
    size_t *map, i;
    memset(&so, 0, sizeof so);
    so.allocator = a->s->a;
    if ((a->bad = wsync__stp_parse_at(a->hdr, a->hend, a->expect, &so, &a->f, &a->bad_err)) != WSYNC_OK) return;
    map = (size_t *)wsync__alloc(&a->s->a, a->s->n * sizeof *map + 1);
    a->dst = (uint8_t **)wsync__alloc(&a->s->a, a->f.n_tensors * sizeof *a->dst + 1);
    if (!map || !a->dst) {
        a->fatal = wsync__fail(&a->fatal_err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor");
    } else if ((a->bad = wsync__sub_anchor_match(a->s, a->e, &a->f, a->covered, map, &a->bad_err)) == WSYNC_OK) {
        for (i = 0; i < a->f.n_tensors; i++) a->dst[i] = NULL;
        for (i = 0; i < a->s->n; i++)
            if (map[i] != SIZE_MAX) a->dst[map[i]] = (uint8_t *)a->s->t[i].data;
        a->parsed = 1;
    }
    wsync__free(&a->s->a, map);
}

/* Takes header bytes at a->pos (up to len); returns how many. */
static size_t wsync__astream_head(wsync__astream *a, const uint8_t *p, size_t len)
{
    uint64_t want = a->hend ? a->hend : 8;
    size_t take = want - a->pos < len ? (size_t)(want - a->pos) : len;
    if (!a->hdr && !(a->hdr = (uint8_t *)wsync__alloc(&a->s->a, 8))) {
        a->fatal = wsync__fail(&a->fatal_err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor header");
        return len;
    }
    memcpy(a->hdr + a->pos, p, take);
    if (!a->hend && a->pos + take == 8) {
        uint64_t n = wsync__load_le64(a->hdr);
        uint8_t *h;
        /* the reader's own limits, met before anything is allocated */
        if (n > WSYNC_ST_MAX_HEADER_SIZE) {
            a->bad = wsync__fail(&a->bad_err, WSYNC_ERR_HEADER_TOO_LARGE, 0, NULL, 0,
                                 "header length %llu is above the limit of %llu bytes", (unsigned long long)n,
                                 (unsigned long long)WSYNC_ST_MAX_HEADER_SIZE);
            return take;
        }
        if (n > a->expect - 8) {
            a->bad = wsync__fail(&a->bad_err, WSYNC_ERR_TRUNCATED, 0, NULL, 0,
                                 "header length %llu runs past the end of the %llu-byte input", (unsigned long long)n,
                                 (unsigned long long)a->expect);
            return take;
        }
        if (!(h = (uint8_t *)wsync__alloc(&a->s->a, (size_t)(8 + n)))) {
            a->fatal = wsync__fail(&a->fatal_err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0,
                                   "%llu bytes for the anchor's header", (unsigned long long)n);
            return len;
        }
        memcpy(h, a->hdr, 8);
        wsync__free(&a->s->a, a->hdr);
        a->hdr = h;
        a->hend = 8 + n;
    }
    if (a->hend && a->pos + take == a->hend) wsync__astream_parse(a); /* before the data */
    return take;
}

/* Takes data bytes at a->pos (up to len, within one tensor); returns how many. */
static size_t wsync__astream_data(wsync__astream *a, const uint8_t *p, size_t len)
{
    uint64_t off = a->pos - a->hend;
    const wsync_st_tensor *t;
    size_t take;
    while (a->ti < a->f.n_tensors && a->f.tensors[a->ti].end <= off) a->ti++;
    if (a->ti == a->f.n_tensors) return len; /* not reached: the tensors fill the data exactly */
    t = &a->f.tensors[a->ti];
    take = t->end - off < len ? (size_t)(t->end - off) : len;
    if (a->dst[a->ti]) {
        memcpy(a->dst[a->ti] + (off - t->begin), p, take);
        a->touched = 1;
    }
    return take;
}

static int wsync__astream_sink(void *user, const void *bytes, size_t len)
{
    wsync__astream *a = (wsync__astream *)user;
    const uint8_t *p = (const uint8_t *)bytes;
    if (len > a->expect - a->pos) {
        a->fatal = wsync__fail(&a->fatal_err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0,
                               "longer than the %llu bytes expected: the store sent more (read no further)",
                               (unsigned long long)a->expect);
        return 1;
    }
    if (a->e->has_digests) wsync_digest_update(&a->ds, p, len);
    if (a->hashing) {
#if WSYNC__HAVE_THREADS
        if (a->hp) wsync__hpipe_feed(a->hp, p, len);
        else
#endif
            wsync_blake2b_update(&a->hs, p, len);
    }
    if (a->fd >= 0) {
        if (!wsync__write_all(a->fd, p, len)) {
            a->fatal = wsync__fail(&a->fatal_err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0,
                                   "cannot write the spool file (wsync_chain_options.spool_dir, else $TMPDIR or "
                                   "/tmp): %s", strerror(errno));
            return 1;
        }
        a->pos += len;
        return 0;
    }
    while (len && a->fatal == WSYNC_OK) {
        size_t take;
        if (a->bad != WSYNC_OK) take = len; /* only the digest now */
        else if (!a->parsed) take = wsync__astream_head(a, p, len);
        else take = wsync__astream_data(a, p, len);
        p += take;
        len -= take;
        a->pos += take;
    }
    /* without a digest to report first, a fault ends the read */
    return a->fatal != WSYNC_OK || (a->bad != WSYNC_OK && !a->e->has_digests);
}

/* Reads anchor e from the store into fd (the spool) or, with fd -1, into
   the targets. Returns the read's result, as wsync__sub_fetch's (WSYNC_OK: the
   object came, judged in *verdict: its size, its digest and, into the
   targets, its header; err holds whichever failed). *touched: a target
   byte was written. */
static wsync_result wsync__sub_anchor_read_obj(wsync_subscriber *s, const wsync_chain_entry *e, const char *rel,
                                           uint64_t expect, uint64_t digest, const uint8_t *hash, uint8_t *covered,
                                           int fd, uint64_t *size, wsync_result *verdict, int *touched,
                                           wsync_error *err)
{
    wsync__astream a;
    char key[WSYNC__KEY_MAX];
    uint64_t total = UINT64_MAX;
    uint8_t h[WSYNC_CHAIN_HASH_SIZE];
    wsync_result r;
    memset(&a, 0, sizeof a);
    a.s = s;
    a.e = e;
    a.expect = expect;
    a.covered = covered;
    a.fd = fd;
    wsync_digest_init(&a.ds);
    /* with a verify key, hashed on the way (hash: the signed HEAD's; NULL: none named) */
    a.hashing = s->verifying;
    wsync_blake2b_init(&a.hs, WSYNC_CHAIN_HASH_SIZE);
    if (a.hashing && expect >= ((uint64_t)16 << 20)) a.hp = wsync__hpipe_start(&s->a);
    *verdict = WSYNC_OK;
    *size = 0;
    wsync__chain_path(key, sizeof key, s->prefix, rel);
    r = s->store.get(s->store.user, key, 0, a.expect, wsync__astream_sink, &a, &total, err);
    *touched = a.touched;
    *size = a.pos;
    if (r == WSYNC_ERR_OUT_OF_BOUNDS && total < a.expect) {
        /* shorter than HEAD says: the object's fault */
        *size = total;
        r = WSYNC_OK;
        *verdict = wsync__fail(err, WSYNC_ERR_TRUNCATED, UINT64_MAX, NULL, 0, "%llu bytes, %s says %llu (torn or truncated)",
                               (unsigned long long)total, e->has_digests ? "HEAD" : "the listing",
                               (unsigned long long)a.expect);
    } else if (a.fatal != WSYNC_OK) {
        r = a.fatal;
        if (err) *err = a.fatal_err;
    } else if (r == WSYNC_ERR_SINK && a.bad != WSYNC_OK) {
        r = WSYNC_OK; /* stopped at a fault of the object's */
        *verdict = a.bad;
        if (err) *err = a.bad_err;
    } else if (r == WSYNC_OK && total != UINT64_MAX && total > a.expect) {
        r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0,
                        "'%s' is %llu bytes, more than the %llu expected (read no further)", key,
                        (unsigned long long)total, (unsigned long long)a.expect);
    } else if (r == WSYNC_OK) {
        int hash_ok = 1;
        if (a.hashing) {
            if (a.hp) wsync__hpipe_end(a.hp, h);
            else wsync_blake2b_final(&a.hs, h);
            a.hp = NULL;
            hash_ok = wsync__sub_hash_check(hash, h, NULL) == WSYNC_OK;
        }
        if (a.pos != a.expect)
            *verdict = wsync__fail(err, WSYNC_ERR_TRUNCATED, UINT64_MAX, NULL, 0, "%llu bytes, %s says %llu (torn or truncated)",
                                   (unsigned long long)a.pos, e->has_digests ? "HEAD" : "the listing",
                                   (unsigned long long)a.expect);
        else if (e->has_digests && wsync_digest_final(&a.ds) != digest)
            *verdict = wsync__fail(err, WSYNC_ERR_DIGEST_MISMATCH, UINT64_MAX, NULL, 0, "%s",
                                   "the digest of its bytes does not match HEAD (corrupt)");
        else if (!hash_ok)
            *verdict = wsync__sub_hash_check(hash, h, err); /* says which */
        else if (fd < 0 && a.bad != WSYNC_OK) {
            *verdict = a.bad;
            if (err) *err = a.bad_err;
        } else if (fd < 0 && !a.parsed)
            *verdict = wsync__fail(err, WSYNC_ERR_TRUNCATED, 0, NULL, 0, "%llu bytes, fewer than the 8-byte header length",
                                   (unsigned long long)a.pos);
    }
    if (a.hp) wsync__hpipe_end(a.hp, h); /* the read stopped early: the hash is not needed */
    wsync__free(&s->a, a.dst);
    wsync__free(&s->a, a.hdr);
    wsync_st_free(&a.f);
    return r;
}

/* Reads anchor e (one object, or a directory anchor's shards in turn,
   appended to one spool file) as wsync__sub_anchor_read_obj does. */
static wsync_result wsync__sub_anchor_read(wsync_subscriber *s, const wsync_chain_entry *e, int fd, uint64_t *size,
                                       wsync_result *verdict, int *touched, wsync_error *err)
{
    uint8_t *covered;
    size_t j;
    wsync_result r = WSYNC_OK;
    if (!e->n_files)
        return wsync__sub_anchor_read_obj(s, e, e->key, e->bytes, e->digest, e->has_hash ? e->hash : NULL, NULL, fd, size,
                                      verdict, touched, err);
    *verdict = WSYNC_OK;
    *size = 0;
    *touched = 0;
    if (!(covered = (uint8_t *)wsync__alloc(&s->a, s->n + 1)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor");
    memset(covered, 0, s->n + 1);
    for (j = 0; j < e->n_files && e->files[j].tensors; j++) {
        const wsync_chain_file *f = &e->files[j];
        char rel[WSYNC__KEY_MAX];
        uint64_t got = 0;
        int t = 0;
        snprintf(rel, sizeof rel, "%s%s", e->key, f->name);
        r = wsync__sub_anchor_read_obj(s, e, rel, f->bytes, f->digest, f->has_hash ? f->hash : NULL, covered, fd, &got,
                                   verdict, &t, err);
        *size += got;
        *touched |= t;
        if (r != WSYNC_OK || *verdict != WSYNC_OK) {
            wsync__obj_fail(err, r != WSYNC_OK ? r : *verdict, f->name); /* which shard */
            break;
        }
    }
    if (r == WSYNC_OK && *verdict == WSYNC_OK && fd < 0) *verdict = wsync__sub_anchor_covered(s, covered, err);
    wsync__free(&s->a, covered);
    return r;
}

/* Tied targets (the same memory under two names): the spool must hold the
   same bytes for both (off[i]: where target i's bytes are in fd), compared
   before anything is written. */
static wsync_result wsync__sub_spool_tied(wsync_subscriber *s, int fd, const uint64_t *off, wsync_error *err)
{
    uint8_t *buf;
    size_t i, half = (size_t)1 << 20;
    wsync_result r = WSYNC_OK;
    if (!s->has_alias) return WSYNC_OK;
    if (!(buf = (uint8_t *)wsync__alloc(&s->a, 2 * half)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "tied targets' check");
    for (i = 0; i < s->n && r == WSYNC_OK; i++) {
        uint64_t done = 0, len = s->t[i].nbytes;
        if (s->alias[i] == i) continue;
        while (done < len && r == WSYNC_OK) {
            size_t k = len - done < half ? (size_t)(len - done) : half;
            if (lseek(fd, (off_t)(off[i] + done), SEEK_SET) == (off_t)-1 || !wsync__read_all(fd, buf, k) ||
                lseek(fd, (off_t)(off[s->alias[i]] + done), SEEK_SET) == (off_t)-1 ||
                !wsync__read_all(fd, buf + half, k))
                r = wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, s->t[i].name, strlen(s->t[i].name),
                                "cannot read the spool file: %s", errno ? strerror(errno) : "it is shorter than written");
            else if (memcmp(buf, buf + half, k) != 0)
                r = wsync__sub_tied_differ(s, i, err);
            done += k;
        }
    }
    wsync__free(&s->a, buf);
    return r;
}

/* The end of applying an anchor spooled in fd, its header matched: target
   i's bytes are at off[i] in the file; the tied targets checked, then
   (unless dry) each target read from the file into it. A read that fails
   after the first target written leaves the targets with no step. */
static wsync_result wsync__sub_spool_read(wsync_subscriber *s, const wsync_chain_entry *e, int fd, const uint64_t *off,
                                          int dry, wsync_error *err)
{
    wsync_result r = wsync__sub_spool_tied(s, fd, off, err);
    int touched = 0;
    size_t i;
    if (r != WSYNC_OK || dry) return r;
    /* everything checked: only now the targets change */
    for (i = 0; i < s->n && r == WSYNC_OK; i++) {
        if (s->alias[i] != i) continue; /* tied: written through the first name */
        touched = 1;
        if (s->t[i].nbytes && (lseek(fd, (off_t)off[i], SEEK_SET) == (off_t)-1 ||
                               !wsync__read_all(fd, (uint8_t *)s->t[i].data, s->t[i].nbytes)))
            r = wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, s->t[i].name, strlen(s->t[i].name),
                            "cannot read the spool file: %s (the targets hold no step)",
                            errno ? strerror(errno) : "it is shorter than written");
    }
    if (r == WSYNC_OK) wsync__sub_moved(s, 1, e->step, e->has_digests);
    else if (touched) wsync__sub_moved(s, 0, 0, 0);
    if (r == WSYNC_OK && s->chg_fn) r = wsync__sub_changes_whole(s, err); /* wsync_subscriber_on_changes */
    return r;
}

/* A directory anchor spooled in fd (its shards one after another): every
   shard's header read and matched, every target found, and only then each
   target's bytes read from the file into it. */
static wsync_result wsync__sub_apply_spooled_dir(wsync_subscriber *s, const wsync_chain_entry *e, int fd, uint64_t size,
                                             int dry, wsync_error *err)
{
    size_t ns = 0, j, i;
    wsync_st_file *fs = NULL;
    uint8_t **hdrs = NULL, *covered = NULL;
    uint64_t *data_at = NULL, base = 0;
    size_t *which = NULL, *shard_of = NULL, *idx = NULL;
    wsync_st_options so;
    wsync_result r = WSYNC_OK;
    memset(&so, 0, sizeof so);
    so.allocator = s->a;
    while (ns < e->n_files && e->files[ns].tensors) ns++;
    fs = (wsync_st_file *)wsync__alloc(&s->a, ns * sizeof *fs + 1);
    hdrs = (uint8_t **)wsync__alloc(&s->a, ns * sizeof *hdrs + 1);
    data_at = (uint64_t *)wsync__alloc(&s->a, ns * sizeof *data_at + 1);
    covered = (uint8_t *)wsync__alloc(&s->a, s->n + 1);
    which = (size_t *)wsync__alloc(&s->a, s->n * sizeof *which + 1);
    shard_of = (size_t *)wsync__alloc(&s->a, s->n * sizeof *shard_of + 1);
    idx = (size_t *)wsync__alloc(&s->a, s->n * sizeof *idx + 1);
    if (!fs || !hdrs || !data_at || !covered || !which || !shard_of || !idx) {
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor");
        goto done;
    }
    memset(fs, 0, ns * sizeof *fs);
    memset(hdrs, 0, ns * sizeof *hdrs);
    memset(covered, 0, s->n + 1);
    for (j = 0; j < ns && r == WSYNC_OK; j++) {
        const wsync_chain_file *f = &e->files[j];
        uint8_t lenb[8];
        uint64_t n;
        if (f->bytes < 8 || base + f->bytes > size) {
            r = wsync__fail(err, WSYNC_ERR_TRUNCATED, 0, NULL, 0, "shard '%s': %llu bytes, too few", f->name,
                            (unsigned long long)f->bytes);
            break;
        }
        if (lseek(fd, (off_t)base, SEEK_SET) == (off_t)-1 || !wsync__read_all(fd, lenb, 8)) {
            r = wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot read the spool file: %s",
                            errno ? strerror(errno) : "it is shorter than written");
            break;
        }
        n = wsync__load_le64(lenb);
        if (n > WSYNC_ST_MAX_HEADER_SIZE || n > f->bytes - 8) {
            r = wsync__stp_parse_at(lenb, 8, f->bytes, NULL, &fs[j], err);
            if (r == WSYNC_OK) r = wsync__fail(err, WSYNC_ERR_INVALID_HEADER, 0, NULL, 0, "%s", "header length");
            wsync__obj_fail(err, r, f->name);
            break;
        }
        if (!(hdrs[j] = (uint8_t *)wsync__alloc(&s->a, (size_t)(8 + n)))) {
            r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "shard header");
            break;
        }
        memcpy(hdrs[j], lenb, 8);
        if (!wsync__read_all(fd, hdrs[j] + 8, n)) {
            r = wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot read the spool file: %s",
                            errno ? strerror(errno) : "it is shorter than written");
            break;
        }
        if ((r = wsync__stp_parse_at(hdrs[j], 8 + n, f->bytes, &so, &fs[j], err)) != WSYNC_OK ||
            (r = wsync__sub_anchor_match(s, e, &fs[j], covered, which, err)) != WSYNC_OK) {
            wsync__obj_fail(err, r, f->name);
            break;
        }
        for (i = 0; i < s->n; i++)
            if (which[i] != SIZE_MAX) shard_of[i] = j, idx[i] = which[i];
        data_at[j] = base + 8 + n;
        base += f->bytes;
    }
    if (r == WSYNC_OK) r = wsync__sub_anchor_covered(s, covered, err);
    if (r == WSYNC_OK) {
        uint64_t *off = (uint64_t *)wsync__alloc(&s->a, s->n * sizeof *off + 1);
        if (!off) r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor");
        for (i = 0; off && i < s->n; i++) off[i] = data_at[shard_of[i]] + fs[shard_of[i]].tensors[idx[i]].begin;
        if (off) r = wsync__sub_spool_read(s, e, fd, off, dry, err);
        wsync__free(&s->a, off);
    }
done:
    for (j = 0; fs && j < ns; j++) wsync_st_free(&fs[j]);
    for (j = 0; hdrs && j < ns; j++) wsync__free(&s->a, hdrs[j]);
    wsync__free(&s->a, fs);
    wsync__free(&s->a, hdrs);
    wsync__free(&s->a, data_at);
    wsync__free(&s->a, covered);
    wsync__free(&s->a, which);
    wsync__free(&s->a, shard_of);
    wsync__free(&s->a, idx);
    return r;
}

/* Brings the targets to anchor e, spooled and checked in fd: header, match,
   then each target's bytes read from the file into it. A read that fails
   after the first byte written leaves the targets with no step. */
static wsync_result wsync__sub_apply_spooled(wsync_subscriber *s, const wsync_chain_entry *e, int fd, uint64_t size,
                                         int dry, wsync_error *err)
{
    uint8_t lenb[8], *hdr = NULL;
    uint64_t n = 0, *off = NULL;
    size_t *map = NULL, i;
    wsync_st_file f;
    wsync_st_options so;
    wsync_result r = WSYNC_OK;
    if (e->n_files) return wsync__sub_apply_spooled_dir(s, e, fd, size, dry, err);
    memset(&f, 0, sizeof f);
    memset(&so, 0, sizeof so);
    so.allocator = s->a;
    if (size < 8)
        return wsync__fail(err, WSYNC_ERR_TRUNCATED, 0, NULL, 0, "%llu bytes, fewer than the 8-byte header length",
                           (unsigned long long)size);
    if (lseek(fd, 0, SEEK_SET) == (off_t)-1 || !wsync__read_all(fd, lenb, 8))
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot read the spool file: %s",
                           errno ? strerror(errno) : "it is shorter than written");
    n = wsync__load_le64(lenb);
    if (n > WSYNC_ST_MAX_HEADER_SIZE || n > size - 8)
        return wsync__stp_parse_at(lenb, 8, size, NULL, &f, err); /* says which, as the reader does */
    if (!(hdr = (uint8_t *)wsync__alloc(&s->a, (size_t)(8 + n))) || !(map = (size_t *)wsync__alloc(&s->a, s->n * sizeof *map + 1))) {
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%llu bytes for the anchor's header",
                        (unsigned long long)n);
        goto done;
    }
    memcpy(hdr, lenb, 8);
    if (!wsync__read_all(fd, hdr + 8, n)) {
        r = wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "cannot read the spool file: %s",
                        errno ? strerror(errno) : "it is shorter than written");
        goto done;
    }
    if ((r = wsync__stp_parse_at(hdr, 8 + n, size, &so, &f, err)) != WSYNC_OK) goto done;
    if ((r = wsync__sub_anchor_match(s, e, &f, NULL, map, err)) != WSYNC_OK) goto done;
    if (!(off = (uint64_t *)wsync__alloc(&s->a, s->n * sizeof *off + 1))) {
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "anchor");
        goto done;
    }
    for (i = 0; i < s->n; i++) off[i] = 8 + n + f.tensors[map[i]].begin;
    r = wsync__sub_spool_read(s, e, fd, off, dry, err);
done:
    wsync_st_free(&f);
    wsync__free(&s->a, map);
    wsync__free(&s->a, off);
    wsync__free(&s->a, hdr);
    return r;
}

/* sync's anchor: straight into targets without a step, else spooled first.
   Returns the read's result; *verdict the check's and the apply's. */
static wsync_result wsync__sub_sync_anchor(wsync_subscriber *s, const wsync_chain_entry *e, uint64_t *size,
                                       wsync_result *verdict, wsync_error *err)
{
    /* tied targets are checked in the spool, before they are written */
    int direct = !wsync_subscriber_step(s, NULL) && !s->has_alias, fd = -1, touched = 0;
    wsync_result r;
    *verdict = WSYNC_OK;
    *size = 0;
    if (!direct && (r = wsync__sub_spool_open(s, &fd, err)) != WSYNC_OK) return r;
    r = wsync__sub_anchor_read(s, e, fd, size, verdict, &touched, err);
    if (r == WSYNC_OK && *verdict == WSYNC_OK) {
        if (!direct) *verdict = wsync__sub_apply_spooled(s, e, fd, *size, 0, err);
        else {
            wsync__sub_moved(s, 1, e->step, e->has_digests);
            if (s->chg_fn) *verdict = wsync__sub_changes_whole(s, err); /* wsync_subscriber_on_changes */
        }
    } else if (touched) {
        /* they held no step and still hold none: empty them rather than
           leave part of a bad anchor that could pass for a model */
        size_t i;
        for (i = 0; i < s->n; i++)
            if (s->t[i].nbytes) memset(s->t[i].data, 0, (size_t)s->t[i].nbytes);
        wsync__sub_moved(s, 0, 0, 0);
    }
    if (fd >= 0) close(fd);
    return r;
}

#if WSYNC__HAVE_THREADS /* used by the prefetch only */
/* The prefetch's anchor: spooled and checked (size, digest); *fd_out keeps
   the file when it is good. */
static wsync_result wsync__pre_anchor(wsync_subscriber *s, const wsync_chain_entry *e, int *fd_out, uint64_t *size,
                                      wsync_result *verdict, wsync_error *err)
{
    int fd = -1, touched = 0;
    wsync_result r;
    *verdict = WSYNC_OK;
    *size = 0;
    if ((r = wsync__sub_spool_open(s, &fd, err)) != WSYNC_OK) return r;
    r = wsync__sub_anchor_read(s, e, fd, size, verdict, &touched, err);
    if (r == WSYNC_OK && *verdict == WSYNC_OK) *fd_out = fd;
    else close(fd);
    return r;
}
#endif
#else
#define WSYNC__SPOOLS 0
#endif

/* A delta's tensors against the targets, before anything moves: each
   entry's tensor is a target's (unless WSYNC_CHAIN_PARTIAL) with its dtype
   and shape (packed: the stream's header; trl: the values' dtype), and a
   packed delta, which lists every tensor of the model, names every target.
   What is not a layout question (a malformed entry) is left to the apply. */
static wsync_result wsync__sub_delta_layout(const wsync_subscriber *s, const uint8_t *bytes, uint64_t size,
                                        wsync_error *err)
{
    wsync_st_file f;
    wsync_encoding enc;
    size_t i, matched = 0;
    int packed, v3;
    wsync_result r;
    wsync_error ig;
    if (wsync__open_delta(bytes, size, &s->a, &f, &enc, &ig) != WSYNC_OK) return WSYNC_OK; /* the apply says */
    packed = enc == WSYNC_ENCODING_PACKED || enc == WSYNC_ENCODING_PACKED_MAX;
    v3 = enc == WSYNC_ENCODING_TRL_V3;
    r = WSYNC_OK;
    for (i = 0; i < f.n_tensors && r == WSYNC_OK; i++) {
        const wsync_st_tensor *t = &f.tensors[i];
        const char *ext = v3 ? ".idx" : ".indices", *vext = v3 ? ".val" : ".values";
        size_t len = t->name_len, sfx = strlen(ext), vsfx = strlen(vext);
        int values = 0, same = 1;
        wsync_tensor *tg;
        char want[128], have[128];
        if (!packed) {
            if (len >= sfx && memcmp(t->name + len - sfx, ext, sfx) == 0) len -= sfx;
            else if (len >= vsfx && memcmp(t->name + len - vsfx, vext, vsfx) == 0) len -= vsfx, values = 1;
            else continue;
        }
        if (!(tg = wsync__target_find(s->sorted, s->n, t->name, len))) {
            if (s->partial) continue;
            r = wsync__fail(err, WSYNC_ERR_LAYOUT, t->key_offset, t->name, len, "%s",
                            "the chain has this tensor and no target does; an engine that holds part of the "
                            "model says so (WSYNC_CHAIN_PARTIAL)");
            break;
        }
        if (packed) {
            const uint8_t *p = t->data;
            uint64_t sz = t->end - t->begin;
            uint32_t k;
            matched++;
            if (t->dtype != WSYNC_DTYPE_U8 || sz < 8 || sz - 8 < 8 * (uint64_t)p[6]) continue; /* malformed */
            same = p[5] == (uint8_t)tg->dtype && p[6] == tg->rank;
            for (k = 0; same && k < tg->rank; k++) same = wsync__load_le64(p + 8 + 8 * k) == tg->shape[k];
            if (!same) {
                wsync__shape_str(want, sizeof want, (wsync_dtype)p[5], p[6], NULL, p + 8);
                wsync__shape_str(have, sizeof have, tg->dtype, tg->rank, tg->shape, NULL);
            }
        } else if (values && t->dtype != tg->dtype) {
            same = 0;
            snprintf(want, sizeof want, "%s", wsync_dtype_name(t->dtype));
            snprintf(have, sizeof have, "%s", wsync_dtype_name(tg->dtype));
        }
        if (!same)
            r = wsync__fail(err, WSYNC_ERR_LAYOUT, t->key_offset, tg->name, strlen(tg->name),
                            "the chain has %s, the target is %s (the model does not match the chain)", want, have);
    }
    if (r == WSYNC_OK && packed && !s->partial && matched != s->n)
        for (i = 0; i < s->n; i++)
            if (!wsync_st_find(&f, s->t[i].name)) {
                r = wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, s->t[i].name, strlen(s->t[i].name), "%s",
                                "the chain has no tensor of this name (its delta, which lists every tensor, "
                                "lacks it): the model does not match the chain");
                break;
            }
    wsync_st_free(&f);
    return r;
}

/* *targets_wrong (when given) is set when the object is proven good (its
   bytes match HEAD's digest) and the failure can only be the targets'. */
static wsync_result wsync__sub_apply_object(wsync_subscriber *s, const wsync_chain_entry *e, const uint8_t *bytes,
                                        uint64_t size, int *targets_wrong, wsync_error *err)
{
    wsync_result r;
    wsync_encoding enc = (wsync_encoding)0;
    int verified = 0;
    if (targets_wrong) *targets_wrong = 0;
    if ((r = wsync__sub_check_object(e, bytes, size, s->verifying, &enc, err)) != WSYNC_OK) return r;
    if (e->kind == WSYNC_CHAIN_ANCHOR) {
        r = wsync__sub_apply_anchor(s, e, bytes, size, err);
        verified = e->has_digests;
    } else {
        wsync_delta_options d;
        int packed = enc == WSYNC_ENCODING_PACKED || enc == WSYNC_ENCODING_PACKED_MAX;
        memset(&d, 0, sizeof d);
        d.allocator = s->pool ? wsync_pool_allocator(s->pool) : s->a;
        d.threads = s->o.threads;
        d.on_changes = s->chg_fn; /* wsync_subscriber_on_changes */
        d.changes_user = s->chg_user;
        d.changes_chunk = s->chg_chunk;
        d.flags |= s->chg_flags & WSYNC_DELTA_CHANGES_PARALLEL;
        /* A packed delta's result digests are checked before anything is
           written, and a wrong base can only give a wrong result, so the base
           pass is redundant on targets this subscriber checked itself; on
           vouched-for targets it stays, for the clearer error. */
        if (packed && s->verified) d.flags |= WSYNC_DELTA_SKIP_BASE_DIGEST;
        if (s->partial) d.flags |= WSYNC_DELTA_PARTIAL;
        if ((r = wsync__sub_delta_layout(s, bytes, size, err)) != WSYNC_OK) return r;
        r = wsync_delta_apply(bytes, size, s->t, s->n, &d, NULL, err);
        verified = packed;
        if (r == WSYNC_ERR_DIGEST_MISMATCH && e->has_digests && targets_wrong) *targets_wrong = 1;
        if (r == WSYNC_ERR_SINK) wsync__sub_moved(s, 1, e->step, verified); /* refused after the write */
    }
    if (r == WSYNC_OK) wsync__sub_moved(s, 1, e->step, verified);
    if (r == WSYNC_OK && e->kind == WSYNC_CHAIN_ANCHOR && s->chg_fn) r = wsync__sub_changes_whole(s, err);
    return r;
}

typedef struct wsync__pathlog {
    int anchor;
    uint64_t anchor_step, first, last;
    unsigned deltas;
} wsync__pathlog;

static void wsync__sub_pathlog_add(wsync__pathlog *pl, wsync_sync_stats *st, const wsync_chain_entry *e, uint64_t size)
{
    if (e->kind == WSYNC_CHAIN_ANCHOR) {
        pl->anchor = 1;
        pl->anchor_step = e->step;
        pl->deltas = 0;
        st->anchors++;
    } else {
        if (!pl->deltas) pl->first = e->step;
        pl->last = e->step;
        pl->deltas++;
        st->deltas++;
    }
    st->bytes_fetched += size;
}

static void wsync__sub_pathlog_str(const wsync__pathlog *pl, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    if (pl->anchor) o += (size_t)snprintf(buf, cap, "anchor %llu", (unsigned long long)pl->anchor_step);
    if (pl->deltas && o < cap) {
        if (pl->deltas == 1)
            snprintf(buf + o, cap - o, "%sdelta %llu", o ? " + " : "", (unsigned long long)pl->last);
        else
            snprintf(buf + o, cap - o, "%sdeltas %llu..%llu", o ? " + " : "", (unsigned long long)pl->first,
                     (unsigned long long)pl->last);
    }
    if (!pl->anchor && !pl->deltas) snprintf(buf, cap, "none");
}

/* The targets against the state digest of e, the entry of their step. */
static wsync_result wsync__sub_verify_entry(wsync_subscriber *s, const wsync_chain_entry *e, wsync_error *err)
{
    uint64_t st = 0; /* set by wsync_state_digest; gcc 12 at -O3 -march=native cannot see it */
    wsync_result r;
    /* part of the model (WSYNC_CHAIN_PARTIAL) cannot be held to the whole one's digest */
    if (!e || !e->has_digests || s->partial) return WSYNC_OK;
    if ((r = wsync_state_digest(s->t, s->n, s->o.threads, &st, err)) != WSYNC_OK) return r;
    s->state_known = st == e->state; /* the mirror's digest of its step (the mirror section) */
    s->state_step = e->step;
    s->state_digest = st;
    if (st != e->state) {
        wsync__sub_moved(s, 0, 0, 0); /* the targets hold no known step: the next sync loads an anchor */
        return wsync__fail(err, WSYNC_ERR_DIGEST_MISMATCH, UINT64_MAX, NULL, 0,
                           "the model after step %llu does not match HEAD's state digest",
                           (unsigned long long)e->step);
    }
    return WSYNC_OK;
}

static wsync_result wsync__sub_verify_state(wsync_subscriber *s, const wsync_chain_info *c, wsync_error *err)
{
    long ai = wsync__chain_find(c, WSYNC_CHAIN_ANCHOR, s->step), di = wsync__chain_find(c, WSYNC_CHAIN_DELTA, s->step);
    return wsync__sub_verify_entry(s, ai >= 0 ? &c->entries[ai] : di >= 0 ? &c->entries[di] : NULL, err);
}

/* HEAD below the step held: never followed in silence (see
   WSYNC_CHAIN_FOLLOW_RESTART); the prefetch's status says it too. */
static wsync_result wsync__sub_stale_head(wsync_subscriber *s, uint64_t head, uint64_t held, wsync_error *err)
{
    wsync_error e;
    wsync__fail(&e, WSYNC_ERR_STALE_HEAD, UINT64_MAX, NULL, 0,
                "HEAD names step %llu, older than step %llu held: a stale copy of HEAD (a cache, a replica, a "
                "restored backup) or a chain restarted at a lower step; the targets stay at step %llu "
                "(WSYNC_CHAIN_FOLLOW_RESTART follows a restarted chain)",
                (unsigned long long)head, (unsigned long long)held, (unsigned long long)held);
    wsync__sub_note_failure(s, WSYNC_ERR_STALE_HEAD, &e);
    if (err) *err = e;
    return WSYNC_ERR_STALE_HEAD;
}

/* The chain as the subscriber reads it: HEAD (signed by the verify key,
   when it has one: wsync_chain_read checks) and, with a verify key, of
   the chain followed: the first identity that passes is kept, and a HEAD
   of another chain signed by the same key is refused. */
static wsync_result wsync__sub_read(wsync_subscriber *s, wsync_chain_info *c, wsync_error *err)
{
    wsync_chain_options o = s->o;
    wsync_result r;
    char got[2 * WSYNC_CHAIN_ID_SIZE + 1], want[2 * WSYNC_CHAIN_ID_SIZE + 1];
    uint64_t held = 0;
    int has_step, other = 0;
    o.prefix = s->prefix;
    if ((r = wsync_chain_read(&s->store, &o, c, err)) != WSYNC_OK || !s->verifying) return r;
    WSYNC__LOCK(&s->mu);
    if (!s->has_chain_id) {
        memcpy(s->chain_id, c->id, WSYNC_CHAIN_ID_SIZE); /* a signed HEAD always names it */
        s->has_chain_id = 1;
    } else if (memcmp(s->chain_id, c->id, WSYNC_CHAIN_ID_SIZE) != 0) {
        other = 1;
        wsync__put_hexbytes(want, s->chain_id, WSYNC_CHAIN_ID_SIZE);
    }
    has_step = s->has_step;
    held = s->step;
    WSYNC__UNLOCK(&s->mu);
    if (!other) return WSYNC_OK;
    wsync__put_hexbytes(got, c->id, WSYNC_CHAIN_ID_SIZE);
    wsync_chain_info_free(c);
    if (has_step)
        return wsync__fail(err, WSYNC_ERR_SIGNATURE, UINT64_MAX, NULL, 0,
                           "object 'HEAD': HEAD is of another chain (id %s) signed by the same key, not the chain "
                           "followed (id %s); the targets stay at step %llu (wsync_subscriber_set_chain_id to "
                           "follow the other)", got, want, (unsigned long long)held);
    return wsync__fail(err, WSYNC_ERR_SIGNATURE, UINT64_MAX, NULL, 0,
                       "object 'HEAD': HEAD is of another chain (id %s) signed by the same key, not the chain "
                       "followed (id %s) (wsync_subscriber_set_chain_id to follow the other)", got, want);
}

static wsync_result wsync__sub_sync(wsync_subscriber *s, uint64_t want, wsync_sync_stats *st, wsync_error *err)
{
    wsync_chain_info c;
    long bad[WSYNC__MAX_BAD], *path = NULL, *tmp = NULL;
    size_t nbad = 0, np = 0, i;
    uint64_t target;
    int refreshed = 0, attempts, dropped = 0, targets_wrong = 0;
    wsync_result r, last_obj = WSYNC_OK;
    wsync_error last_err;
    wsync__pathlog pl;
    memset(&pl, 0, sizeof pl);
    wsync__error_reset(&last_err);
    r = wsync__sub_read(s, &c, err);
    wsync__sub_head_seen(s, r == WSYNC_OK, r == WSYNC_OK ? c.head_step : 0);
    if (r != WSYNC_OK) return r;
    st->head_step = c.head_step;
    st->verified = c.has_head;
    target = want == WSYNC_STEP_LATEST ? c.head_step : want;
    if (want == WSYNC_STEP_LATEST) {
        uint64_t cur = 0;
        if (wsync_subscriber_step(s, &cur) && c.head_step < cur) {
            if (!(s->o.flags & WSYNC_CHAIN_FOLLOW_RESTART)) {
                r = wsync__sub_stale_head(s, c.head_step, cur, err);
                goto done;
            }
            /* a chain restarted at a lower step: what the targets hold is
               none of its steps, so they start again from an anchor */
            wsync__sub_moved(s, 0, 0, 0);
        }
    }
    for (attempts = 0; attempts < 64; attempts++) {
        int has;
        uint64_t cur = 0;
        has = wsync_subscriber_step(s, &cur);
        if (has && cur == target) break;
        if (wsync__chain_find(&c, WSYNC_CHAIN_ANCHOR, target) < 0 && wsync__chain_find(&c, WSYNC_CHAIN_DELTA, target) < 0) {
            r = wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0, "step %llu is not in the chain (HEAD is at %llu)",
                            (unsigned long long)target, (unsigned long long)c.head_step);
            goto done;
        }
        wsync__free(&s->a, path);
        wsync__free(&s->a, tmp);
        path = (long *)wsync__alloc(&s->a, (c.n_entries + 1) * sizeof *path);
        tmp = (long *)wsync__alloc(&s->a, (c.n_entries + 1) * sizeof *tmp);
        if (!path || !tmp) {
            r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "plan");
            goto done;
        }
        if (!wsync__sub_plan(&c, has, cur, target, bad, nbad, path, &np, tmp)) {
            if (last_obj != WSYNC_OK) {
                if (err) *err = last_err;
                r = last_obj;
            } else {
                r = wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0,
                                "no anchor or chain of deltas reaches step %llu", (unsigned long long)target);
            }
            goto done;
        }
        for (i = 0; i < np; i++) {
            const wsync_chain_entry *e = &c.entries[path[i]];
            uint8_t *bytes = NULL;
            uint64_t size = 0;
            wsync_error oe;
            int got, streamed = 0;
            wsync_result verdict = WSYNC_OK;
            wsync__error_reset(&oe);
#if WSYNC__SPOOLS
            /* an anchor is streamed into the targets or spooled, never held */
            if ((streamed = wsync__sub_anchor_streams(e)) != 0) r = wsync__sub_sync_anchor(s, e, &size, &verdict, &oe);
            else
#endif
                r = wsync__sub_fetch(s, e, &bytes, &size, &oe);
            if (r == WSYNC_ERR_NOT_FOUND && !refreshed) {
                /* retention removed it after we read HEAD: read HEAD again */
                wsync_chain_info c2;
                wsync_result rr;
                refreshed = 1;
                if ((rr = wsync__sub_read(s, &c2, err)) == WSYNC_ERR_SIGNATURE) {
                    r = rr; /* the new HEAD fails the key: stop where the targets are */
                    goto done;
                }
                if (rr == WSYNC_OK) {
                    wsync_chain_info_free(&c);
                    c = c2;
                    nbad = 0;
                    if (want == WSYNC_STEP_LATEST) target = c.head_step;
                    st->head_step = c.head_step;
                    st->verified = c.has_head;
                    wsync__sub_head_seen(s, 1, c.head_step);
                }
                break;
            }
            got = r == WSYNC_OK;
            if (got) r = streamed ? verdict : wsync__sub_apply_object(s, e, bytes, size, &targets_wrong, &oe);
            if (r == WSYNC_OK) {
                wsync__sub_pathlog_add(&pl, st, e, size);
                wsync__sub_unrefuse(s, e);
            }
            wsync__free(&s->a, bytes);
            if (r != WSYNC_OK) {
                wsync__obj_fail(&oe, r, e->key);
                if (targets_wrong && !dropped) {
                    /* the targets are not the step they claim (vouched for, or
                       changed behind our back): forget it and take an anchor */
                    dropped = 1;
                    last_obj = r;
                    last_err = oe;
                    st->rejected++;
                    wsync__sub_moved(s, 0, 0, 0);
                    break;
                }
                if (wsync__sub_not_the_object(r)) {
                    /* the store or this machine failed, not the object: stop here */
                    if (err) *err = oe;
                    goto done;
                }
                if (got) wsync__sub_refuse(s, e); /* the prefetch will not fetch it again */
                last_obj = r;
                last_err = oe;
                st->rejected++;
                if (nbad < WSYNC__MAX_BAD) bad[nbad++] = path[i];
                else {
                    if (err) *err = oe;
                    goto done;
                }
                break;
            }
        }
    }
    {
        uint64_t cur;
        if (!wsync_subscriber_step(s, &cur) || cur != target) {
            r = wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0, "gave up before reaching step %llu",
                            (unsigned long long)target);
            goto done;
        }
    }
    r = WSYNC_OK;
    if (s->verify_state) r = wsync__sub_verify_state(s, &c, err);
done:
    wsync__sub_pathlog_str(&pl, st->path, sizeof st->path);
    wsync__free(&s->a, path);
    wsync__free(&s->a, tmp);
    wsync_chain_info_free(&c);
    return r;
}

static void wsync__sub_stats_begin(wsync_subscriber *s, wsync_sync_stats *st)
{
    memset(st, 0, sizeof *st);
    st->had_step = wsync_subscriber_step(s, &st->from_step);
}

static void wsync__sub_stats_end(wsync_subscriber *s, wsync_sync_stats *st)
{
    uint64_t step = 0;
    if (wsync_subscriber_step(s, &step)) st->step = step;
}

WSYNC_DEF wsync_result wsync_subscriber_sync(wsync_subscriber *s, uint64_t step, wsync_sync_stats *stats,
                                             wsync_error *err)
{
    wsync_sync_stats st;
    wsync_result r;
    wsync__error_reset(err);
    if (!s) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no subscriber");
    wsync__sub_stats_begin(s, &st);
    WSYNC__LOCK(&s->mu);
    s->busy = 1;
    WSYNC__UNLOCK(&s->mu);
    r = wsync__sub_sync(s, step, &st, err);
    WSYNC__LOCK(&s->mu);
    s->busy = 0;
    WSYNC__UNLOCK(&s->mu);
    wsync__sub_stats_end(s, &st);
    if (stats) *stats = st;
    return r;
}

/* ---- the background prefetch: polls, plans, fetches, offers >>prefetch ---- */

static void wsync__pre_free(wsync_subscriber *s, wsync__fetched *pre, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        wsync__free(&s->a, pre[i].bytes);
        wsync__free(&s->a, pre[i].files);
#if WSYNC__SPOOLS
        if (pre[i].fd >= 0) close(pre[i].fd);
#endif
    }
    wsync__free(&s->a, pre);
}

/* The prefetch's objects lead from the step the targets hold (under mu). */
static int wsync__pre_fresh(const wsync_subscriber *s)
{
    return s->pre_ready && s->pre_has_from == s->has_step && (!s->has_step || s->pre_from == s->step);
}

#if WSYNC__HAVE_THREADS
/* One poll's work, kept between its attempts: the chain read, the entries
   to avoid, and each object fetched and checked (by entry index), so that
   a plan around a bad object fetches nothing twice. */
typedef struct wsync__poll {
    wsync_chain_info c;
    long *bad, *path, *tmp;
    size_t nbad, np;
    uint8_t **bytes;
    uint64_t *size;
    int *fd;             /* anchors spooled (bytes NULL): the open files; else -1 */
    int has;             /* the targets' step when the poll began */
    uint64_t cur;
    int restart;         /* plan from no step: HEAD is below it (WSYNC_CHAIN_FOLLOW_RESTART) */
    int failed;          /* a failure was noted */
} wsync__poll;

/* The newest step above `floor` (any step when !has_floor) that a plan
   reaches from the targets; 0 when none. */
static int wsync__poll_plan(wsync__poll *p, int has_floor, uint64_t floor)
{
    const wsync_chain_info *c = &p->c;
    size_t na = 0, ia, id;
    while (na < c->n_entries && c->entries[na].kind == WSYNC_CHAIN_ANCHOR) na++;
    ia = na;
    id = c->n_entries;
    /* anchors and deltas are each ascending: merge them downwards */
    while (ia > 0 || id > na) {
        uint64_t a = ia > 0 ? c->entries[ia - 1].step : 0, d = id > na ? c->entries[id - 1].step : 0;
        uint64_t target = ia > 0 && (id == na || a >= d) ? a : d;
        while (ia > 0 && c->entries[ia - 1].step == target) ia--;
        while (id > na && c->entries[id - 1].step == target) id--;
        if (has_floor && target <= floor) return 0;
        if (wsync__sub_plan(c, p->has && !p->restart, p->cur, target, p->bad, p->nbad, p->path, &p->np, p->tmp))
            return 1;
    }
    return 0;
}

/* Offers path[0..n) (fetched and checked) unless the targets moved meanwhile. */
static int wsync__poll_offer(wsync_subscriber *s, wsync__poll *p, size_t n)
{
    wsync__fetched *pre, *old = NULL;
    size_t i, n_old = 0;
    int offered = 0;
    if (!(pre = (wsync__fetched *)wsync__alloc(&s->a, (n + 1) * sizeof *pre))) return 0;
    memset(pre, 0, (n + 1) * sizeof *pre);
    for (i = 0; i < n; i++) {
        pre[i].e = p->c.entries[p->path[i]];
        if (pre[i].e.n_files) { /* the poll's chain goes: the entry keeps its files */
            size_t fb = pre[i].e.n_files * sizeof *pre[i].files;
            if (!(pre[i].files = (wsync_chain_file *)wsync__alloc(&s->a, fb))) {
                wsync__pre_free(s, pre, i);
                return 0;
            }
            memcpy(pre[i].files, pre[i].e.files, fb);
            pre[i].e.files = pre[i].files;
        }
        pre[i].bytes = p->bytes[p->path[i]];
        pre[i].size = p->size[p->path[i]];
        pre[i].fd = p->fd[p->path[i]];
        p->bytes[p->path[i]] = NULL;
        p->fd[p->path[i]] = -1;
    }
    WSYNC__LOCK(&s->mu);
    if (s->has_step == p->has && (!p->has || s->step == p->cur)) {
        old = s->pre;
        n_old = s->n_pre;
        s->pre = pre;
        s->n_pre = n;
        s->pre_ready = 1;
        s->pre_has_from = p->has;
        s->pre_from = p->cur;
        s->pre_step = p->c.entries[p->path[n - 1]].step;
        s->pre_verified = p->c.has_head;
        s->pre_head = p->c.head_step;
        s->pre_restart = p->restart;
        offered = 1;
    } else {
        old = pre; /* planned from a step the targets no longer hold */
        n_old = n;
    }
    WSYNC__UNLOCK(&s->mu);
    if (old) wsync__pre_free(s, old, n_old);
    return offered;
}

/* Plans to the newest step it can reach above `have`, fetches and checks
   the path, refuses a bad object and plans again around it; offers the
   first path whose objects are all good. 1 when it offered. */
static int wsync__poll_fetch(wsync_subscriber *s, wsync__poll *p, int any, uint64_t have)
{
    int attempts;
    for (attempts = 0; attempts < 64; attempts++) {
        size_t i;
        if (!wsync__poll_plan(p, any, have)) return 0;
        for (i = 0; i < p->np; i++) {
            long k = p->path[i];
            const wsync_chain_entry *e = &p->c.entries[k];
            wsync_error oe;
            wsync_result r, verdict = WSYNC_OK;
            int streamed = 0;
            if (p->bytes[k] || p->fd[k] >= 0) continue;
            wsync__error_reset(&oe);
#if WSYNC__SPOOLS
            /* an anchor waits in a spool file, checked, not in memory */
            if ((streamed = wsync__sub_anchor_streams(e)) != 0)
                r = wsync__pre_anchor(s, e, &p->fd[k], &p->size[k], &verdict, &oe);
            else
#endif
                r = wsync__sub_fetch(s, e, &p->bytes[k], &p->size[k], &oe);
            if (r != WSYNC_OK && !wsync__sub_not_the_object(r) && r != WSYNC_ERR_NOT_FOUND) {
                /* the object itself is wrong (larger than HEAD says, cut off
                   unread): refused like one that fails its check */
                wsync__obj_fail(&oe, r, e->key);
                wsync__sub_note_failure(s, r, &oe);
                p->failed = 1;
                wsync__free(&s->a, p->bytes[k]);
                p->bytes[k] = NULL;
                wsync__sub_refuse(s, e);
                p->bad[p->nbad++] = k;
                break;
            }
            if (r != WSYNC_OK) {
                /* the store failed (or retention removed it after HEAD was
                   read): offer what leads somewhere, try again next poll */
                wsync__obj_fail(&oe, r, e->key);
                wsync__sub_note_failure(s, r, &oe);
                p->failed = 1;
                p->bytes[k] = NULL;
                if (i > 0 && (!any || p->c.entries[p->path[i - 1]].step > have)) return wsync__poll_offer(s, p, i);
                return 0;
            }
            r = streamed ? verdict : wsync__sub_check_object(e, p->bytes[k], p->size[k], s->verifying, NULL, &oe);
            /* a good object the engine's model cannot take is said now, not at apply_ready */
#if WSYNC__SPOOLS
            if (r == WSYNC_OK && streamed) r = wsync__sub_apply_spooled(s, e, p->fd[k], p->size[k], 1, &oe);
#endif
            if (r == WSYNC_OK && !streamed && e->kind == WSYNC_CHAIN_DELTA)
                r = wsync__sub_delta_layout(s, p->bytes[k], p->size[k], &oe);
            if (r != WSYNC_OK) {
                wsync__obj_fail(&oe, r, e->key);
                wsync__sub_note_failure(s, r, &oe);
                p->failed = 1;
                wsync__free(&s->a, p->bytes[k]);
                p->bytes[k] = NULL;
                if (wsync__sub_not_the_object(r)) return 0;
                wsync__sub_refuse(s, e);
                p->bad[p->nbad++] = k;
                break;
            }
        }
        if (i == p->np) return p->np ? wsync__poll_offer(s, p, p->np) : 0;
    }
    return 0;
}

/* One poll of the background thread: read HEAD, plan to the newest step
   reachable, fetch and check. 1: it offered a step; -1: it failed without
   offering one; 0: nothing to do. */
static int wsync__bg_poll(wsync_subscriber *s)
{
    wsync__poll p;
    wsync_error err;
    wsync__fetched *stale = NULL;
    size_t i, j, n_stale = 0;
    int any, outcome = 0;
    uint64_t have;
    wsync_result r;
    memset(&p, 0, sizeof p);
    /* the targets pass through intermediate steps: a plan from one of them
       would fetch again what the engine is applying */
    WSYNC__LOCK(&s->mu);
    any = s->busy;
    WSYNC__UNLOCK(&s->mu);
    if (any) return 0;
    r = wsync__sub_read(s, &p.c, &err);
    WSYNC__LOCK(&s->mu);
    s->polls++;
    WSYNC__UNLOCK(&s->mu);
    wsync__sub_head_seen(s, r == WSYNC_OK, p.c.head_step);
    if (r != WSYNC_OK) {
        if (r == WSYNC_ERR_NOT_FOUND) return 0; /* an empty chain */
        wsync__sub_note_failure(s, r, &err);
        return -1;
    }
    p.bad = (long *)wsync__alloc(&s->a, (p.c.n_entries + 1) * sizeof *p.bad);
    p.path = (long *)wsync__alloc(&s->a, (p.c.n_entries + 1) * sizeof *p.path);
    p.tmp = (long *)wsync__alloc(&s->a, (p.c.n_entries + 1) * sizeof *p.tmp);
    p.bytes = (uint8_t **)wsync__alloc(&s->a, (p.c.n_entries + 1) * sizeof *p.bytes);
    p.size = (uint64_t *)wsync__alloc(&s->a, (p.c.n_entries + 1) * sizeof *p.size);
    p.fd = (int *)wsync__alloc(&s->a, (p.c.n_entries + 1) * sizeof *p.fd);
    if (p.fd)
        for (i = 0; i < p.c.n_entries; i++) p.fd[i] = -1;
    if (!p.bad || !p.path || !p.tmp || !p.bytes || !p.size || !p.fd) {
        wsync__fail(&err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "prefetch plan");
        wsync__sub_note_failure(s, WSYNC_ERR_OUT_OF_MEMORY, &err);
        outcome = -1;
        goto out;
    }
    memset(p.bytes, 0, (p.c.n_entries + 1) * sizeof *p.bytes);
    WSYNC__LOCK(&s->mu);
    /* a refusal lasts while the chain names its key with the same size and
       digest; the refused entries are avoided */
    for (i = 0; i < s->n_refused;) {
        int kept = 0;
        for (j = 0; j < p.c.n_entries; j++) {
            if (strcmp(s->refused[i].key, p.c.entries[j].key) != 0) continue;
            if (wsync__sub_refusal_is(&s->refused[i], &p.c.entries[j])) {
                size_t k = 0;
                while (k < p.nbad && p.bad[k] != (long)j) k++;
                if (k == p.nbad) p.bad[p.nbad++] = (long)j; /* once: at most n_entries */
                kept = 1;
            }
        }
        if (kept) i++;
        else s->refused[i] = s->refused[--s->n_refused];
    }
    p.has = s->has_step;
    p.cur = s->step;
    if (s->busy) {
        WSYNC__UNLOCK(&s->mu);
        goto out;
    }
    if (s->pre && !wsync__pre_fresh(s)) {
        /* planned from a step the targets no longer hold (a sync moved them) */
        stale = s->pre;
        n_stale = s->n_pre;
        s->pre = NULL;
        s->n_pre = 0;
        s->pre_ready = 0;
    }
    any = p.has || s->pre_ready;
    have = s->pre_ready ? s->pre_step : p.cur;
    if (p.has && p.c.head_step < p.cur && !(s->pre_ready && s->pre_restart)) {
        if (!(s->o.flags & WSYNC_CHAIN_FOLLOW_RESTART)) {
            WSYNC__UNLOCK(&s->mu);
            if (stale) wsync__pre_free(s, stale, n_stale);
            wsync__sub_stale_head(s, p.c.head_step, p.cur, NULL);
            outcome = -1;
            goto out;
        }
        p.restart = 1; /* fetch the restarted chain from its anchor */
        any = 0;
    }
    WSYNC__UNLOCK(&s->mu);
    if (stale) wsync__pre_free(s, stale, n_stale);
    if (any && have >= p.c.head_step) goto out;
    if (wsync__poll_fetch(s, &p, any, have)) outcome = 1;
    else if (p.failed) outcome = -1;
    else {
        /* nothing newer is reachable: say why, or the status would read as
           a prefetch with nothing to do (the refused objects are avoided
           until the store changes them; a sync tries every way again) */
        if (p.nbad)
            wsync__fail(&err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0,
                        "no way from step %llu to HEAD's step %llu but through '%s'%s, refused earlier: "
                        "fetched again once the store changes it, or by a sync",
                        (unsigned long long)have, (unsigned long long)p.c.head_step, p.c.entries[p.bad[0]].key,
                        p.nbad > 1 ? " (or other refused objects)" : "");
        else
            wsync__fail(&err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0,
                        "no way from step %llu to HEAD's step %llu: the chain holds no anchor or delta that leads on",
                        (unsigned long long)have, (unsigned long long)p.c.head_step);
        wsync__sub_note_failure(s, WSYNC_ERR_NO_PATH, &err);
        outcome = -1;
    }
out:
    if (p.bytes)
        for (i = 0; i < p.c.n_entries; i++) wsync__free(&s->a, p.bytes[i]);
#if WSYNC__SPOOLS
    if (p.fd)
        for (i = 0; i < p.c.n_entries; i++)
            if (p.fd[i] >= 0) close(p.fd[i]);
#endif
    wsync__free(&s->a, p.fd);
    wsync__free(&s->a, p.bytes);
    wsync__free(&s->a, p.size);
    wsync__free(&s->a, p.bad);
    wsync__free(&s->a, p.path);
    wsync__free(&s->a, p.tmp);
    wsync_chain_info_free(&p.c);
    return outcome;
}

static unsigned wsync__bg_interval(const wsync_subscriber *s)
{
    uint64_t ms = (uint64_t)s->interval_ms << s->backoff;
    if (ms > WSYNC__BACKOFF_CAP_MS) ms = WSYNC__BACKOFF_CAP_MS;
    if (ms < s->interval_ms) ms = s->interval_ms;
    return (unsigned)ms;
}

static void *wsync__bg_main(void *arg)
{
    wsync_subscriber *s = (wsync_subscriber *)arg;
    for (;;) {
        struct timeval now;
        struct timespec until;
        int stop, outcome = wsync__bg_poll(s);
        unsigned ms;
        pthread_mutex_lock(&s->mu);
        /* a poll that failed without progress waits twice as long as the last */
        if (outcome < 0) {
            if (s->backoff < WSYNC__MAX_BACKOFF) s->backoff++;
        } else {
            s->backoff = 0;
        }
        ms = wsync__bg_interval(s);
        pthread_mutex_unlock(&s->mu);
        gettimeofday(&now, NULL);
        until.tv_sec = now.tv_sec + (time_t)(ms / 1000);
        until.tv_nsec = (long)now.tv_usec * 1000 + (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&s->mu);
        if (!s->bg_stop) pthread_cond_timedwait(&s->cv, &s->mu, &until);
        stop = s->bg_stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
    }
    return NULL;
}
#endif

WSYNC_DEF wsync_result wsync_subscriber_start(wsync_subscriber *s, unsigned interval_ms, wsync_error *err)
{
    wsync__error_reset(err);
    if (!s) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no subscriber");
#if WSYNC__HAVE_THREADS
    if (s->bg_running) return WSYNC_OK;
    pthread_mutex_lock(&s->mu);
    s->interval_ms = interval_ms ? interval_ms : 1;
    s->backoff = 0;
    s->bg_stop = 0;
    pthread_mutex_unlock(&s->mu);
    if (pthread_create(&s->th, NULL, wsync__bg_main, s) != 0)
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "%s", "cannot start the prefetch thread");
    pthread_mutex_lock(&s->mu);
    s->bg_running = 1;
    pthread_mutex_unlock(&s->mu);
    return WSYNC_OK;
#else
    (void)interval_ms;
    return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s",
                       "background prefetch needs POSIX threads (built with WSYNC_NO_THREADS)");
#endif
}

WSYNC_DEF int wsync_subscriber_ready(wsync_subscriber *s, uint64_t *step)
{
    int ready;
    if (!s) return 0;
    WSYNC__LOCK(&s->mu);
    ready = wsync__pre_fresh(s) && (!s->has_step || s->pre_step > s->step || s->pre_restart);
    if (ready && step) *step = s->pre_step;
    WSYNC__UNLOCK(&s->mu);
    return ready;
}

/* apply_ready's failure on an object: noted for the status, and the object
   refused unless the targets are to blame (then their step is forgotten:
   the next poll plans from an anchor, as sync would). */
static void wsync__sub_apply_ready_failed(wsync_subscriber *s, const wsync_chain_entry *e, wsync_result r,
                                      int targets_wrong, const wsync_error *err)
{
    if (targets_wrong) wsync__sub_moved(s, 0, 0, 0);
    else if (!wsync__sub_not_the_object(r)) wsync__sub_refuse(s, e);
    wsync__sub_note_failure(s, r, err);
}

WSYNC_DEF wsync_result wsync_subscriber_apply_ready(wsync_subscriber *s, wsync_sync_stats *stats, wsync_error *err)
{
    wsync_sync_stats st;
    wsync__fetched *pre;
    wsync_error oe;
    size_t n, i;
    int fresh, targets_wrong = 0;
    wsync_result r = WSYNC_OK;
    wsync__pathlog pl;
    wsync__error_reset(err);
    wsync__error_reset(&oe);
    if (!s) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no subscriber");
    wsync__sub_stats_begin(s, &st);
    memset(&pl, 0, sizeof pl);
    WSYNC__LOCK(&s->mu);
    pre = s->pre;
    n = s->n_pre;
    fresh = wsync__pre_fresh(s);
    st.head_step = fresh ? s->pre_head : s->head_step;
    st.verified = fresh && s->pre_verified;
    s->pre = NULL;
    s->n_pre = 0;
    s->pre_ready = 0;
    s->pre_restart = 0;
    s->busy = 1;
    WSYNC__UNLOCK(&s->mu);
    /* a prefetch planned from a step the targets no longer hold is dropped */
    for (i = 0; fresh && i < n; i++) {
#if WSYNC__SPOOLS
        if (pre[i].fd >= 0) r = wsync__sub_apply_spooled(s, &pre[i].e, pre[i].fd, pre[i].size, 0, &oe);
        else
#endif
            r = wsync__sub_apply_object(s, &pre[i].e, pre[i].bytes, pre[i].size, &targets_wrong, &oe);
        if (r != WSYNC_OK) {
            wsync__obj_fail(&oe, r, pre[i].e.key);
            wsync__sub_apply_ready_failed(s, &pre[i].e, r, targets_wrong, &oe);
            if (!wsync__sub_not_the_object(r)) st.rejected++;
            break;
        }
        wsync__sub_pathlog_add(&pl, &st, &pre[i].e, pre[i].size);
    }
    if (r == WSYNC_OK && fresh && n && s->verify_state) {
        /* as sync: the whole model against HEAD's state digest for its step */
        if ((r = wsync__sub_verify_entry(s, &pre[n - 1].e, &oe)) != WSYNC_OK) wsync__sub_note_failure(s, r, &oe);
    }
    if (r != WSYNC_OK && err) *err = oe;
    WSYNC__LOCK(&s->mu);
    s->busy = 0;
    WSYNC__UNLOCK(&s->mu);
    if (pre) wsync__pre_free(s, pre, n);
    wsync__sub_pathlog_str(&pl, st.path, sizeof st.path);
    wsync__sub_stats_end(s, &st);
    if (stats) *stats = st;
    return r;
}

WSYNC_DEF wsync_result wsync_subscriber_prefetch_status(wsync_subscriber *s, wsync_prefetch_status *out)
{
    if (!s || !out) return WSYNC_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    WSYNC__LOCK(&s->mu);
    out->running = s->bg_running;
    out->polls = s->polls;
    out->head_known = s->head_known;
    out->head_step = s->head_step;
    out->ready = wsync__pre_fresh(s) && (!s->has_step || s->pre_step > s->step || s->pre_restart);
    if (out->ready) out->ready_step = s->pre_step;
    out->caught_up = s->head_known && s->has_step && s->step == s->head_step;
    out->refused = (unsigned)s->n_refused;
#if WSYNC__HAVE_THREADS
    out->interval_ms = s->bg_running ? wsync__bg_interval(s) : 0;
#endif
    out->last_result = s->last_result;
    out->last_error = s->last_err;
    out->last_error_time = s->last_time;
    WSYNC__UNLOCK(&s->mu);
    return WSYNC_OK;
}

WSYNC_DEF void wsync_subscriber_stop(wsync_subscriber *s)
{
    if (!s) return;
#if WSYNC__HAVE_THREADS
    if (!s->bg_running) return;
    pthread_mutex_lock(&s->mu);
    s->bg_stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    pthread_mutex_lock(&s->mu);
    s->bg_running = 0;
    pthread_mutex_unlock(&s->mu);
#endif
}

WSYNC_DEF void wsync_subscriber_close(wsync_subscriber *s)
{
    wsync_allocator a;
    if (!s) return;
    wsync_subscriber_stop(s);
    if (s->pre) wsync__pre_free(s, s->pre, s->n_pre);
#if WSYNC__HAVE_THREADS
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
#endif
    wsync_pool_free(s->pool);
    a = s->a;
    wsync__free(&a, s->spool_dir);
    wsync__free(&a, s->sorted);
    wsync__free(&a, s->alias);
    wsync__free(&a, s->t);
    wsync__free(&a, s);
}

/* ---- the mirror: changes recorded, merged, handed to an engine >>mirror ---- */

WSYNC_DEF void wsync_subscriber_on_changes(wsync_subscriber *s, wsync_changes_fn fn, void *user, uint32_t chunk,
                                           unsigned flags)
{
    if (!s) return;
    s->chg_fn = fn;
    s->chg_user = user;
    s->chg_chunk = chunk;
    s->chg_flags = flags;
}

/* An anchor just written: every target whole, to the subscriber's callback. */
static wsync_result wsync__sub_changes_whole(wsync_subscriber *s, wsync_error *err)
{
    size_t i;
    for (i = 0; i < s->n; i++) {
        wsync_changes c;
        int rc;
        memset(&c, 0, sizeof c);
        c.tensor = &s->t[i];
        c.index = i;
        c.width = wsync_dtype_bits(s->t[i].dtype) / 8;
        c.whole = 1;
        c.count = c.width ? s->t[i].nbytes / c.width : 0;
        c.values = s->t[i].data;
        c.last = 1;
        if ((rc = s->chg_fn(s->chg_user, &c)) != 0)
            return wsync__fail(err, WSYNC_ERR_SINK, UINT64_MAX, s->t[i].name, strlen(s->t[i].name),
                               "the changes callback returned %d: the targets hold the anchor", rc);
    }
    return WSYNC_OK;
}

/* One tensor's changes since the engine's last take: whole, or the log
   (one apply's report, as it came), or the bitmap (count bits set); never
   the log and bits at once. */
typedef struct wsync__mrec {
    uint64_t *bits;   /* one per element; whole: stale, cleared by the take */
    uint64_t words;
    uint64_t count;   /* bits set */
    uint64_t nelem;
    unsigned w;
    int whole;
    int log;          /* 1: the pending changes are lpos/lval[0..llen) */
    int log_done;     /* the log's apply handed its last chunk */
    uint64_t *lpos;   /* ascending positions */
    uint8_t *lval;    /* llen values of w bytes */
    uint64_t llen, lcap;
} wsync__mrec;

struct wsync_mirror {
    wsync_allocator a;
    wsync_subscriber *sub;
    wsync_tensor *t;
    size_t n;
    uint8_t *block;       /* wsync's memory for the mirror (tensors NULL at open) */
    wsync_st_file hdr;    /* the anchor's header: names and shapes of that memory */
    wsync__mrec *rec;
    uint64_t record_bytes; /* the bitmaps */
    uint64_t log_bytes, log_limit; /* the logs' capacity (under qmu), and its bound */
    size_t chunk;
    uint8_t *buf;         /* the take's chunk: chunk positions, then chunk values */
    unsigned interval_ms, threads;
    int no_wait;
    /* under qmu (read without waiting for an apply) */
    int has_step, has_state, eng_has, eng_has_state;
    uint64_t step, state, eng_step, eng_state, steps;
    uint64_t f_anchors, f_deltas, f_bytes; /* fetched and applied since the last take */
    int running, stop;
#if WSYNC__HAVE_THREADS
    pthread_mutex_t mu;   /* the mirror's lock: applies and takes */
    pthread_mutex_t qmu;
    pthread_cond_t cv;
    pthread_t th;
#endif
};

static void wsync__mrec_whole(wsync__mrec *r)
{
    r->whole = 1;
    r->log = 0;
    r->llen = 0;
}

static void wsync__mrec_whole_all(wsync_mirror *m)
{
    size_t i;
    for (i = 0; i < m->n; i++) wsync__mrec_whole(&m->rec[i]);
}

/* Sets the bits of n ascending positions; a tensor whose merged patch
   reaches WSYNC_CHANGES_WHOLE goes whole. */
static void wsync__mrec_bits(wsync__mrec *r, const uint64_t *pos, uint64_t n)
{
    uint64_t k, added = 0;
    for (k = 0; k < n; k++) {
        uint64_t p = pos[k], b = (uint64_t)1 << (p & 63), *wd = &r->bits[p >> 6];
        added += !(*wd & b);
        *wd |= b;
    }
    r->count += added;
    if (WSYNC_CHANGES_WHOLE(r->count, r->nelem, r->w)) r->whole = 1;
}

/* The log into the bitmap (the merge: a second apply, or a log that could
   not grow). */
static void wsync__mrec_fold(wsync__mrec *r)
{
    if (!r->log) return;
    r->log = 0;
    wsync__mrec_bits(r, r->lpos, r->llen);
    r->llen = 0;
}

/* Room in the log for `more` entries; 0 when the logs' bound (the model's
   bytes, which a log of at most the tensor's bytes keeps to by itself) or
   the allocator says no. */
static int wsync__mrec_grow(wsync_mirror *m, wsync__mrec *r, uint64_t more)
{
    /* at most what WSYNC_CHANGES_WHOLE allows: the tensor's bytes */
    uint64_t need = r->llen + more, cap = r->lcap ? r->lcap : 4096, add, most = r->nelem * r->w / (8 + r->w);
    uint64_t *np;
    uint8_t *nv;
    if (need <= r->lcap) return 1;
    while (cap < need) cap *= 2;
    if (cap > most) cap = most > need ? most : need;
    if (cap > (uint64_t)SIZE_MAX / 8) return 0;
    add = (cap - r->lcap) * (8 + (uint64_t)r->w);
    WSYNC__LOCK(&m->qmu);
    if (add > m->log_limit - m->log_bytes) add = 0;
    else m->log_bytes += add;
    WSYNC__UNLOCK(&m->qmu);
    if (!add) return 0;
    np = (uint64_t *)wsync__alloc(&m->a, (size_t)cap * 8);
    nv = (uint8_t *)wsync__alloc(&m->a, (size_t)cap * r->w);
    if (!np || !nv) {
        wsync__free(&m->a, np);
        wsync__free(&m->a, nv);
        WSYNC__LOCK(&m->qmu);
        m->log_bytes -= add;
        WSYNC__UNLOCK(&m->qmu);
        return 0;
    }
    if (r->llen) {
        memcpy(np, r->lpos, (size_t)r->llen * 8);
        memcpy(nv, r->lval, (size_t)r->llen * r->w);
    }
    wsync__free(&m->a, r->lpos);
    wsync__free(&m->a, r->lval);
    r->lpos = np;
    r->lval = nv;
    r->lcap = cap;
    return 1;
}

/* The subscriber's callback: a chunk of one tensor's changes, recorded
   (tensors are never shared between threads: WSYNC_DELTA_CHANGES_PARALLEL). */
static int wsync__mirror_record(void *user, const wsync_changes *c)
{
    wsync_mirror *m = (wsync_mirror *)user;
    wsync__mrec *r;
    if (c->index >= m->n) return 1;
    r = &m->rec[c->index];
    if (r->whole) return 0;
    if (c->whole || !r->bits) {
        wsync__mrec_whole(r);
        return 0;
    }
    /* a second apply's changes to this tensor before a take: merged */
    if (r->log && r->log_done) wsync__mrec_fold(r);
    if (!r->log && !r->count) { /* nothing pending: this apply's report is the log */
        r->log = 1;
        r->log_done = 0;
        r->llen = 0;
    }
    if (r->log) {
        if (WSYNC_CHANGES_WHOLE(r->llen + c->count, r->nelem, r->w)) {
            wsync__mrec_whole(r);
            return 0;
        }
        if (wsync__mrec_grow(m, r, c->count)) {
            memcpy(r->lpos + r->llen, c->positions, (size_t)c->count * 8);
            memcpy(r->lval + (size_t)r->llen * r->w, c->values, (size_t)c->count * r->w);
            r->llen += c->count;
            r->log_done = c->last;
            return 0;
        }
        wsync__mrec_fold(r); /* no room: the bitmap */
    }
    wsync__mrec_bits(r, c->positions, c->count);
    return 0;
}

/* After an apply (under mu): the records and the mirror's step and digest. */
static void wsync__mirror_moved(wsync_mirror *m, const wsync_sync_stats *st)
{
    uint64_t cur = 0, state = 0;
    int has = wsync_subscriber_step(m->sub, &cur), has_state = 0;
    int moved = st->anchors || st->deltas || !has || !m->has_step || cur != m->step;
    /* an anchor (however it was written), or targets that hold no known
       step: everything whole */
    if (st->anchors || !has) wsync__mrec_whole_all(m);
    if (!moved) {
        WSYNC__LOCK(&m->qmu);
        m->f_bytes += st->bytes_fetched;
        WSYNC__UNLOCK(&m->qmu);
        return;
    }
    if (has) {
        if (m->sub->state_known && m->sub->state_step == cur) {
            state = m->sub->state_digest;
            has_state = 1;
        } else {
            wsync_error e;
            has_state = wsync_state_digest(m->t, m->n, m->threads, &state, &e) == WSYNC_OK;
        }
    }
    WSYNC__LOCK(&m->qmu);
    m->has_step = has;
    m->step = cur;
    m->has_state = has_state;
    m->state = state;
    m->steps += (uint64_t)st->anchors + st->deltas;
    m->f_anchors += st->anchors;
    m->f_deltas += st->deltas;
    m->f_bytes += st->bytes_fetched;
    WSYNC__UNLOCK(&m->qmu);
}

/* sync (or apply_ready when !sync) under the mirror's lock. */
static wsync_result wsync__mirror_apply(wsync_mirror *m, int sync, uint64_t step, wsync_sync_stats *stats,
                                        wsync_error *err)
{
    wsync_sync_stats st;
    wsync_result r;
    WSYNC__LOCK(&m->mu);
    m->sub->state_known = 0;
    r = sync ? wsync_subscriber_sync(m->sub, step, &st, err) : wsync_subscriber_apply_ready(m->sub, &st, err);
    wsync__mirror_moved(m, &st);
    WSYNC__UNLOCK(&m->mu);
    if (stats) *stats = st;
    return r;
}

typedef struct wsync__msink {
    uint8_t *p;
    uint64_t cap, len;
} wsync__msink;

static int wsync__msink_put(void *user, const void *bytes, size_t len)
{
    wsync__msink *k = (wsync__msink *)user;
    if (len > k->cap - k->len) return 1;
    memcpy(k->p + k->len, bytes, len);
    k->len += len;
    return 0;
}

/* tensors NULL: the mirror's memory from the newest anchor's header. */
static wsync_result wsync__mirror_alloc(wsync_mirror *m, const wsync_store *store, const wsync_chain_options *co,
                                        wsync_error *err)
{
    wsync_chain_info c;
    const wsync_chain_entry *e = NULL;
    char prefix[WSYNC__PREFIX_MAX], key[WSYNC__KEY_MAX];
    uint8_t len8[8];
    wsync__msink k;
    uint64_t hlen, size = 0, pad;
    wsync_st_options so;
    wsync_result r;
    size_t i;
    if ((r = wsync__chain_prefix(prefix, co->prefix, err)) != WSYNC_OK) return r;
    {
        wsync_chain_options o = *co;
        o.prefix = prefix;
        if ((r = wsync_chain_read(store, &o, &c, err)) != WSYNC_OK) return r;
    }
    for (i = 0; i < c.n_entries; i++)
        if (c.entries[i].kind == WSYNC_CHAIN_ANCHOR && c.entries[i].step == c.anchor_step) e = &c.entries[i];
    if (!e) {
        wsync_chain_info_free(&c);
        return wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "%s", "the chain holds no anchor");
    }
    if (e->n_files) {
        wsync_chain_info_free(&c);
        return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s",
                           "the newest anchor is a directory's: the mirror takes its layout from an anchor of one "
                           "object only; give it the host tensors instead");
    }
    wsync__chain_path(key, sizeof key, prefix, e->key);
    size = e->bytes;
    wsync_chain_info_free(&c);
    if (!size && store->head && (r = store->head(store->user, key, &size, err)) != WSYNC_OK) return r;
    k.p = len8;
    k.cap = 8;
    k.len = 0;
    if ((r = store->get(store->user, key, 0, 8, wsync__msink_put, &k, NULL, err)) != WSYNC_OK) return r;
    hlen = k.len == 8 ? wsync__load_le64(len8) : UINT64_MAX;
    if (hlen > WSYNC_ST_MAX_HEADER_SIZE || size < 8 || hlen > size - 8 || size > (uint64_t)SIZE_MAX - 128)
        return wsync__fail(err, WSYNC_ERR_INVALID_HEADER, 0, NULL, 0, "anchor '%s': header length %llu of %llu bytes",
                           key, (unsigned long long)hlen, (unsigned long long)size);
    pad = (64 - (8 + hlen) % 64) % 64; /* the data section on 64 bytes */
    if (!(m->block = (uint8_t *)wsync__alloc(&m->a, (size_t)(pad + size))))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%llu bytes for the mirror",
                           (unsigned long long)size);
    memset(m->block, 0, (size_t)(pad + size));
    memcpy(m->block + pad, len8, 8);
    k.p = m->block + pad + 8;
    k.cap = hlen;
    k.len = 0;
    if (hlen && (r = store->get(store->user, key, 8, hlen, wsync__msink_put, &k, NULL, err)) != WSYNC_OK) return r;
    if (k.len != hlen)
        return wsync__fail(err, WSYNC_ERR_TRUNCATED, 8, NULL, 0, "anchor '%s': header cut short", key);
    memset(&so, 0, sizeof so);
    so.allocator = m->a;
    if ((r = wsync_st_parse(m->block + pad, size, &so, &m->hdr, err)) != WSYNC_OK) return r;
    if ((r = wsync_st_check_names(&m->hdr, err)) != WSYNC_OK) return r;
    memset(m->block + pad, 0, (size_t)(8 + hlen)); /* the header's bytes are not the model's */
    if (!(m->t = (wsync_tensor *)wsync__alloc(&m->a, (m->hdr.n_tensors + 1) * sizeof *m->t)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "mirror tensors");
    m->n = m->hdr.n_tensors;
    for (i = 0; i < m->n; i++) {
        const wsync_st_tensor *a = &m->hdr.tensors[i];
        m->t[i].name = a->name;
        m->t[i].dtype = a->dtype;
        m->t[i].rank = a->rank;
        m->t[i].shape = a->shape;
        m->t[i].data = (void *)(m->block + pad + 8 + hlen + a->begin);
        m->t[i].nbytes = a->end - a->begin;
    }
    return WSYNC_OK;
}

#if WSYNC__HAVE_THREADS
static void *wsync__mirror_main(void *arg)
{
    wsync_mirror *m = (wsync_mirror *)arg;
    unsigned ms = m->interval_ms / 8;
    if (ms < 1) ms = 1;
    if (ms > 50) ms = 50;
    for (;;) {
        struct timeval now;
        struct timespec until;
        int stop;
        if (wsync_subscriber_ready(m->sub, NULL)) {
            wsync_error e;
            wsync__mirror_apply(m, 0, 0, NULL, &e); /* failures: wsync_subscriber_prefetch_status */
        }
        gettimeofday(&now, NULL);
        until.tv_sec = now.tv_sec;
        until.tv_nsec = (long)now.tv_usec * 1000 + (long)ms * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&m->qmu);
        if (!m->stop) pthread_cond_timedwait(&m->cv, &m->qmu, &until);
        stop = m->stop;
        pthread_mutex_unlock(&m->qmu);
        if (stop) break;
    }
    return NULL;
}
#endif

WSYNC_DEF wsync_result wsync_mirror_open(const wsync_store *store, wsync_tensor *tensors, size_t n,
                                         const wsync_mirror_options *opt, wsync_mirror **out, wsync_error *err)
{
    wsync_mirror_options o;
    wsync_mirror *m;
    wsync_result r;
    size_t i;
    wsync__error_reset(err);
    if (!store || !out || !store->get || (n && !tensors))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_mirror_open arguments");
    *out = NULL;
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (!(m = (wsync_mirror *)wsync__alloc(&o.chain.allocator, sizeof *m)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "mirror");
    memset(m, 0, sizeof *m);
    m->a = o.chain.allocator;
    m->interval_ms = o.interval_ms ? o.interval_ms : 1000;
    m->chunk = o.chunk ? o.chunk : 65536;
    if (m->chunk > ((size_t)SIZE_MAX >> 5)) m->chunk = (size_t)SIZE_MAX >> 5;
    m->no_wait = o.no_wait;
    m->threads = o.chain.threads;
#if WSYNC__HAVE_THREADS
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->qmu, NULL);
    pthread_cond_init(&m->cv, NULL);
#endif
    if (tensors) {
        if ((r = wsync__check_tensors(tensors, n, err)) != WSYNC_OK) goto fail;
        if (!(m->t = (wsync_tensor *)wsync__alloc(&m->a, (n + 1) * sizeof *m->t))) goto oom;
        if (n) memcpy(m->t, tensors, n * sizeof *m->t);
        m->n = n;
    } else if ((r = wsync__mirror_alloc(m, store, &o.chain, err)) != WSYNC_OK) {
        goto fail;
    }
    if (!(m->rec = (wsync__mrec *)wsync__alloc(&m->a, (m->n + 1) * sizeof *m->rec))) goto oom;
    memset(m->rec, 0, (m->n + 1) * sizeof *m->rec);
    for (i = 0; i < m->n; i++) {
        wsync__mrec *rc = &m->rec[i];
        rc->w = wsync_dtype_bits(m->t[i].dtype) / 8;
        rc->whole = 1; /* the engine holds nothing yet */
        if (rc->w != 1 && rc->w != 2 && rc->w != 4 && rc->w != 8) continue; /* anchors only: whole */
        rc->nelem = m->t[i].nbytes / rc->w;
        rc->words = (rc->nelem + 63) / 64;
        if (rc->words > (uint64_t)SIZE_MAX / 8 || !(rc->bits = (uint64_t *)wsync__alloc(&m->a, (size_t)rc->words * 8)))
            goto oom;
        memset(rc->bits, 0, (size_t)rc->words * 8);
        m->record_bytes += rc->words * 8;
        m->log_limit += m->t[i].nbytes;
    }
    if (!(m->buf = (uint8_t *)wsync__alloc(&m->a, m->chunk * 16))) goto oom;
    {
        wsync_chain_options co = o.chain;
        co.flags |= WSYNC_CHAIN_VERIFY_STATE;
        if ((r = wsync_subscriber_open(store, m->t, m->n, &co, &m->sub, err)) != WSYNC_OK) goto fail;
    }
    wsync_subscriber_on_changes(m->sub, wsync__mirror_record, m, 0, WSYNC_DELTA_CHANGES_PARALLEL);
    *out = m;
    return WSYNC_OK;
oom:
    r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "mirror records");
fail:
    wsync_mirror_close(m);
    return r;
}

WSYNC_DEF const wsync_tensor *wsync_mirror_tensors(const wsync_mirror *m, size_t *n)
{
    if (n) *n = m ? m->n : 0;
    return m ? m->t : NULL;
}

WSYNC_DEF wsync_result wsync_mirror_start(wsync_mirror *m, wsync_error *err)
{
    wsync_result r;
    wsync__error_reset(err);
    if (!m) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no mirror");
#if WSYNC__HAVE_THREADS
    if (m->running) return WSYNC_OK;
    if ((r = wsync_subscriber_start(m->sub, m->interval_ms, err)) != WSYNC_OK) return r;
    m->stop = 0;
    if (pthread_create(&m->th, NULL, wsync__mirror_main, m) != 0) {
        wsync_subscriber_stop(m->sub);
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "%s", "cannot start the mirror's thread");
    }
    m->running = 1;
    return WSYNC_OK;
#else
    (void)r;
    return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s",
                       "the mirror's background needs POSIX threads (built with WSYNC_NO_THREADS)");
#endif
}

WSYNC_DEF void wsync_mirror_stop(wsync_mirror *m)
{
    if (!m) return;
#if WSYNC__HAVE_THREADS
    if (!m->running) return;
    pthread_mutex_lock(&m->qmu);
    m->stop = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->qmu);
    pthread_join(m->th, NULL);
    m->running = 0;
    wsync_subscriber_stop(m->sub);
#endif
}

WSYNC_DEF wsync_result wsync_mirror_sync(wsync_mirror *m, uint64_t step, wsync_sync_stats *stats,
                                         wsync_error *err)
{
    wsync__error_reset(err);
    if (!m) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no mirror");
    return wsync__mirror_apply(m, 1, step, stats, err);
}

WSYNC_DEF wsync_result wsync_mirror_set_step(wsync_mirror *m, uint64_t step, wsync_error *err)
{
    uint64_t state = 0;
    size_t i;
    wsync_result r;
    wsync__error_reset(err);
    if (!m) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no mirror");
    WSYNC__LOCK(&m->mu);
    r = wsync_state_digest(m->t, m->n, m->threads, &state, err);
    if (r == WSYNC_OK) {
        wsync_subscriber_set_step(m->sub, step);
        for (i = 0; i < m->n; i++) {
            wsync__mrec *rc = &m->rec[i];
            if (rc->bits) memset(rc->bits, 0, (size_t)rc->words * 8);
            rc->count = 0;
            rc->whole = 0;
            rc->log = 0;
            rc->llen = 0;
        }
        WSYNC__LOCK(&m->qmu);
        m->has_step = m->eng_has = m->has_state = m->eng_has_state = 1;
        m->step = m->eng_step = step;
        m->state = m->eng_state = state;
        m->steps = 0;
        m->f_anchors = m->f_deltas = m->f_bytes = 0;
        WSYNC__UNLOCK(&m->qmu);
    }
    WSYNC__UNLOCK(&m->mu);
    return r;
}

/* A tensor's recorded positions through fn, clearing them; *out: nonzero
   when fn refused (w a constant where inlined). */
WSYNC__INLINE void wsync__mirror_hand_w(wsync_mirror *m, size_t i, wsync_changes_fn fn, void *user,
                                        wsync_mirror_stats *st, int *out, const unsigned w)
{
    wsync__mrec *rc = &m->rec[i];
    const uint8_t *data = (const uint8_t *)m->t[i].data;
    uint64_t *pos = (uint64_t *)(void *)m->buf, wi, left = rc->count;
    uint8_t *val = m->buf + m->chunk * 8;
    size_t k = 0;
    wsync_changes c;
    int rc_ = 0;
    *out = 0;
    memset(&c, 0, sizeof c);
    c.tensor = &m->t[i];
    c.index = i;
    c.width = w;
    c.positions = pos;
    c.values = val;
    for (wi = 0; wi < rc->words && left; wi++) {
        uint64_t b = rc->bits[wi];
        if (!b) continue;
        rc->bits[wi] = 0;
        while (b) {
            uint64_t p = wi * 64 + wsync__ctz64(b);
            b &= b - 1;
            pos[k] = p;
            memcpy(val + k * w, data + (size_t)p * w, w);
            k++;
            left--;
            if (k == m->chunk || !left) {
                c.count = k;
                c.last = !left;
                st->chunks++;
                st->positions += k;
                st->bytes += k * (8 + (uint64_t)w);
                k = 0;
                if ((rc_ = fn(user, &c)) != 0) {
                    *out = rc_;
                    return;
                }
            }
        }
    }
}

/* A tensor's log through fn, chunk by chunk, straight from the log. */
static int wsync__mirror_hand_log(wsync_mirror *m, size_t i, wsync_changes_fn fn, void *user, wsync_mirror_stats *st)
{
    wsync__mrec *rc = &m->rec[i];
    uint64_t off = 0;
    wsync_changes c;
    memset(&c, 0, sizeof c);
    c.tensor = &m->t[i];
    c.index = i;
    c.width = rc->w;
    while (off < rc->llen) {
        int refused;
        c.count = rc->llen - off < m->chunk ? rc->llen - off : m->chunk;
        c.positions = rc->lpos + off;
        c.values = rc->lval + (size_t)off * rc->w;
        off += c.count;
        c.last = off == rc->llen;
        st->chunks++;
        st->positions += c.count;
        st->bytes += c.count * (8 + (uint64_t)rc->w);
        if ((refused = fn(user, &c)) != 0) return refused;
    }
    return 0;
}

static int wsync__mirror_hand(wsync_mirror *m, size_t i, wsync_changes_fn fn, void *user, wsync_mirror_stats *st)
{
    int out = 0;
    if (m->rec[i].log) return wsync__mirror_hand_log(m, i, fn, user, st);
    WSYNC__BY_WIDTH(m->rec[i].w, wsync__mirror_hand_w, m, i, fn, user, st, &out);
    return out;
}

WSYNC_DEF wsync_result wsync_mirror_take(wsync_mirror *m, wsync_changes_fn fn, void *user,
                                         wsync_mirror_stats *stats, wsync_error *err)
{
    wsync_mirror_stats st;
    wsync_result r = WSYNC_OK;
    double t0 = wsync__wall(), t1;
    size_t i;
    int pending = 0;
    wsync__error_reset(err);
    memset(&st, 0, sizeof st);
    if (!m || !fn) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_mirror_take arguments");
#if WSYNC__HAVE_THREADS
    if (m->no_wait) {
        if (pthread_mutex_trylock(&m->mu) != 0) {
            st.busy = 1;
            st.had_step = st.has_step = wsync_mirror_engine_step(m, &st.step);
            st.from_step = st.step;
            st.pause_seconds = wsync__wall() - t0;
            if (stats) *stats = st;
            return WSYNC_OK;
        }
    } else
#endif
        WSYNC__LOCK(&m->mu);
    t1 = wsync__wall();
    st.wait_seconds = t1 - t0;
    WSYNC__LOCK(&m->qmu);
    st.record_bytes = m->record_bytes + m->log_bytes;
    WSYNC__UNLOCK(&m->qmu);
    st.had_step = m->eng_has;
    st.from_step = m->eng_step;
    for (i = 0; i < m->n; i++) pending |= m->rec[i].whole || m->rec[i].count || m->rec[i].log;
    if (m->has_step && (pending || !m->eng_has || m->eng_step != m->step)) {
        for (i = 0; i < m->n && r == WSYNC_OK; i++) {
            wsync__mrec *rc = &m->rec[i];
            int refused = 0;
            if (!rc->whole && !rc->count && !rc->log) continue;
            st.tensors++;
            if (rc->whole || WSYNC_CHANGES_WHOLE(rc->log ? rc->llen : rc->count, rc->nelem, rc->w)) {
                wsync_changes c;
                memset(&c, 0, sizeof c);
                c.tensor = &m->t[i];
                c.index = i;
                c.width = rc->w;
                c.whole = 1;
                c.count = rc->w ? m->t[i].nbytes / rc->w : 0;
                c.values = m->t[i].data;
                c.last = 1;
                st.whole_tensors++;
                st.chunks++;
                st.bytes += m->t[i].nbytes;
                if (rc->bits && rc->count) memset(rc->bits, 0, (size_t)rc->words * 8);
                if ((refused = fn(user, &c)) != 0) rc->whole = 1;
            } else if ((refused = wsync__mirror_hand(m, i, fn, user, &st)) != 0) {
                rc->whole = 1; /* partly handed: next time whole */
            }
            rc->log = 0;
            rc->llen = 0;
            if (refused) {
                r = wsync__fail(err, WSYNC_ERR_SINK, UINT64_MAX, m->t[i].name, strlen(m->t[i].name),
                                "the take's callback returned %d: the engine holds a mixture until the next take",
                                refused);
                break;
            }
            rc->whole = 0;
            rc->count = 0;
        }
        WSYNC__LOCK(&m->qmu);
        if (r == WSYNC_OK) {
            m->eng_has = 1;
            m->eng_step = m->step;
            m->eng_has_state = m->has_state;
            m->eng_state = m->state;
            st.steps = m->steps;
            st.anchors = m->f_anchors;
            st.deltas = m->f_deltas;
            st.bytes_fetched = m->f_bytes;
            m->steps = 0;
            m->f_anchors = m->f_deltas = m->f_bytes = 0;
            st.handed = 1;
        } else {
            m->eng_has = 0;
            m->eng_has_state = 0;
        }
        WSYNC__UNLOCK(&m->qmu);
    }
    st.has_step = m->eng_has;
    st.step = m->eng_step;
    WSYNC__UNLOCK(&m->mu);
    st.pause_seconds = wsync__wall() - t0;
    if (stats) *stats = st;
    return r;
}

WSYNC_DEF int wsync_mirror_engine_step(wsync_mirror *m, uint64_t *step)
{
    int has;
    if (!m) return 0;
    WSYNC__LOCK(&m->qmu);
    has = m->eng_has;
    if (has && step) *step = m->eng_step;
    WSYNC__UNLOCK(&m->qmu);
    return has;
}

WSYNC_DEF int wsync_mirror_step(wsync_mirror *m, uint64_t *step)
{
    int has;
    if (!m) return 0;
    WSYNC__LOCK(&m->qmu);
    has = m->has_step;
    if (has && step) *step = m->step;
    WSYNC__UNLOCK(&m->qmu);
    return has;
}

WSYNC_DEF int wsync_mirror_state_digest(wsync_mirror *m, uint64_t *digest)
{
    int has;
    if (!m) return 0;
    WSYNC__LOCK(&m->qmu);
    has = m->eng_has && m->eng_has_state;
    if (has && digest) *digest = m->eng_state;
    WSYNC__UNLOCK(&m->qmu);
    return has;
}

WSYNC_DEF wsync_subscriber *wsync_mirror_subscriber(wsync_mirror *m) { return m ? m->sub : NULL; }

WSYNC_DEF void wsync_mirror_close(wsync_mirror *m)
{
    wsync_allocator a;
    size_t i;
    if (!m) return;
    wsync_mirror_stop(m);
    wsync_subscriber_close(m->sub);
    if (m->rec)
        for (i = 0; i < m->n; i++) {
            wsync__free(&m->a, m->rec[i].bits);
            wsync__free(&m->a, m->rec[i].lpos);
            wsync__free(&m->a, m->rec[i].lval);
        }
    a = m->a;
    wsync__free(&a, m->rec);
    wsync__free(&a, m->buf);
    wsync__free(&a, m->t);
    wsync_st_free(&m->hdr);
    wsync__free(&a, m->block);
#if WSYNC__HAVE_THREADS
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->qmu);
    pthread_cond_destroy(&m->cv);
#endif
    wsync__free(&a, m);
}

/* ---- engine map: a mirror's changes into an engine's parameters >>engine-map ---- */

/* One piece of one rank's map, resolved: tensor t's [start, start + len)
   along dim lands at [off, off + len) of parameter p's dim. */
typedef struct wsync__eref {
    size_t t, p, k;            /* tensor, parameter, piece (k SIZE_MAX: whole, by name) */
    size_t rank;
    uint32_t dim;
    uint64_t start, len, off;
    uint64_t inner, sdim, pdim; /* elements after dim; the tensor's and parameter's dim */
} wsync__eref;

struct wsync_engine {
    wsync_allocator a;
    wsync_mirror *m;
    const wsync_map_param *p;
    size_t np;
    wsync__eref *refs;         /* sorted by tensor */
    size_t nrefs;
    size_t *first;             /* refs of tensor t: [first[t], first[t + 1]) */
    uint64_t *mark;            /* per parameter: the take that last fed it */
    uint64_t *tmark;           /* per tensor: the take that last handed it (the end call's refusal) */
    uint64_t takes;
    unsigned flags;
    size_t chunk;
    uint64_t *pos;             /* chunk positions */
    uint8_t *val;              /* chunk values (8 bytes each at most) */
    /* WSYNC_ENGINE_MERGE */
    struct wsync__egather *g; /* per ref: the take's changes gathered */
    size_t *pref, *pfirst;     /* refs of parameter p by offset: pref[pfirst[p] .. pfirst[p + 1]) */
    size_t *plast;             /* per parameter: its last tensor */
    uint64_t *pmark;           /* per parameter: the take it is pending in */
    size_t *pend, npend;       /* the parameters holding gathered changes */
    uint64_t *opos, ocap, oused; /* a parameter merged from several refs, no reserve */
    uint64_t gbytes;           /* the gathers' capacity, bytes */
    uint8_t *oval;
    wsync_param_reserve_fn reserve;
    void *ruser;
    /* during a take */
    wsync_param_changes_fn fn;
    void *user;
    wsync_engine_stats *st;
    int end_rc;                /* the end call's nonzero return */
    int oom;                   /* gathering ran out of memory */
};

/* WSYNC_ENGINE_MERGE: one ref's changes in a take, gathered (used: the
   most it held in the take; the capacity is kept while used needs it). */
typedef struct wsync__egather {
    uint64_t *pos;
    uint8_t *val;
    uint64_t n, cap, used;
} wsync__egather;

static int wsync__eref_cmp(const void *x, const void *y)
{
    const wsync__eref *a = (const wsync__eref *)x, *b = (const wsync__eref *)y;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return 0;
}

static size_t wsync__emap_find(const wsync_tensor *t, size_t n, const char *name)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return i;
    return SIZE_MAX;
}

/* One rank's map resolved into refs (appended at *nr, room for them
   counted by the caller); each piece checked on its own. */
static wsync_result wsync__emap_refs(const wsync_tensor *t, size_t n, const wsync_map_param *p, size_t np,
                                     size_t rank, wsync__eref *refs, size_t *nr, wsync_error *err)
{
    size_t j, k, d;
    for (j = 0; j < np; j++) {
        const wsync_map_param *q = &p[j];
        uint64_t sum = 0, elems = 1;
        size_t one = q->n_pieces ? q->n_pieces : 1;
        if (!q->name || !*q->name)
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0, "map parameter %zu has no name", j);
        for (k = 0; k < j; k++)
            if (!strcmp(p[k].name, q->name))
                return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                   "parameter '%s' is in the map twice", q->name);
        if ((q->rank && !q->shape) || q->rank > WSYNC_ST_DEFAULT_MAX_RANK)
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                               "parameter '%s': rank %u without a shape or above %u", q->name, q->rank,
                               (unsigned)WSYNC_ST_DEFAULT_MAX_RANK);
        for (d = 0; d < q->rank; d++) {
            if (q->shape[d] && elems > UINT64_MAX / q->shape[d])
                return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                   "parameter '%s': its shape overflows", q->name);
            elems *= q->shape[d];
        }
        if (q->n_pieces && q->dim >= q->rank)
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                               "parameter '%s': dim %u of a rank-%u parameter", q->name, q->dim, q->rank);
        if (q->n_pieces && !q->pieces)
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                               "parameter '%s': %zu pieces, none given", q->name, q->n_pieces);
        for (k = 0; k < one; k++) {
            const char *tn = q->n_pieces ? q->pieces[k].tensor : q->name;
            size_t ti = tn ? wsync__emap_find(t, n, tn) : SIZE_MAX;
            const wsync_tensor *c;
            wsync__eref *r = &refs[*nr];
            uint64_t inner = 1;
            if (ti == SIZE_MAX) {
                if (!q->n_pieces)
                    return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                       "parameter '%s' has no pieces and no checkpoint tensor has its name",
                                       q->name);
                return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                   "parameter '%s' piece %zu: no checkpoint tensor '%s'", q->name, k,
                                   tn ? tn : "(null)");
            }
            c = &t[ti];
            if (c->dtype != q->dtype)
                return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                   "parameter '%s' piece %zu: dtype %s, tensor '%s' is %s", q->name, k,
                                   wsync_dtype_name(q->dtype), c->name, wsync_dtype_name(c->dtype));
            if (c->rank != q->rank)
                return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                   "parameter '%s' piece %zu: rank %u, tensor '%s' has rank %u", q->name, k,
                                   q->rank, c->name, c->rank);
            for (d = 0; d < q->rank; d++) {
                if (q->n_pieces && d == q->dim) continue;
                if (c->shape[d] != q->shape[d])
                    return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                       "parameter '%s' piece %zu: dim %zu is %llu, tensor '%s' has %llu", q->name,
                                       k, d, (unsigned long long)q->shape[d], c->name,
                                       (unsigned long long)c->shape[d]);
                if (d > (q->n_pieces ? q->dim : 0)) inner *= q->shape[d];
            }
            memset(r, 0, sizeof *r);
            r->t = ti;
            r->p = j;
            r->rank = rank;
            r->k = q->n_pieces ? k : SIZE_MAX;
            r->dim = q->n_pieces ? q->dim : 0;
            r->inner = q->rank ? inner : 1;
            r->sdim = q->rank ? c->shape[r->dim] : 1;
            r->pdim = q->rank ? q->shape[r->dim] : 1;
            if (q->n_pieces) {
                const wsync_map_piece *pc = &q->pieces[k];
                if (!pc->length || pc->start > c->shape[q->dim] || pc->length > c->shape[q->dim] - pc->start)
                    return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                       "parameter '%s' piece %zu: [%llu, +%llu) along dim %u of tensor '%s' "
                                       "(%llu long)", q->name, k, (unsigned long long)pc->start,
                                       (unsigned long long)pc->length, q->dim, c->name,
                                       (unsigned long long)c->shape[q->dim]);
                r->start = pc->start;
                r->len = pc->length;
                r->off = sum;
                if (pc->length > q->shape[q->dim] - (sum < q->shape[q->dim] ? sum : q->shape[q->dim]))
                    return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                       "parameter '%s' is smaller than its pieces: piece %zu ends at %llu along dim "
                                       "%u, the parameter has %llu", q->name, k,
                                       (unsigned long long)(sum + pc->length), q->dim,
                                       (unsigned long long)q->shape[q->dim]);
                sum += pc->length;
            } else {
                r->start = 0;
                r->len = r->sdim;
            }
            ++*nr;
        }
        if (q->n_pieces && sum + q->pad != q->shape[q->dim])
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                               "parameter '%s': its pieces hold %llu along dim %u and pad %llu, the parameter has %llu",
                               q->name, (unsigned long long)sum, q->dim, (unsigned long long)q->pad,
                               (unsigned long long)q->shape[q->dim]);
    }
    return WSYNC_OK;
}

/* Piece k of q as (tensor, start, length) along its dim; a parameter
   without pieces is its own tensor, whole. */
static void wsync__emap_piece_of(const wsync_map_param *q, size_t k, const char **tn, uint64_t *start, uint64_t *len)
{
    if (q->n_pieces) {
        *tn = q->pieces[k].tensor;
        *start = q->pieces[k].start;
        *len = q->pieces[k].length;
    } else {
        *tn = q->name;
        *start = 0;
        *len = q->rank ? q->shape[0] : 1;
    }
}

/* Tied parameters (an lm_head tied to the embedding): two parameters of
   one rank with the same dtype, shape, dim, pieces and pad, so each gets
   the same changes. */
static int wsync__emap_tied(const wsync_map_param *x, const wsync_map_param *y)
{
    size_t nx = x->n_pieces ? x->n_pieces : 1, ny = y->n_pieces ? y->n_pieces : 1, k;
    uint32_t dx = x->n_pieces ? x->dim : 0, dy = y->n_pieces ? y->dim : 0, d;
    uint64_t px = x->n_pieces ? x->pad : 0, py = y->n_pieces ? y->pad : 0;
    if (x == y || x->dtype != y->dtype || x->rank != y->rank || nx != ny || px != py || (x->rank && dx != dy))
        return 0;
    for (d = 0; d < x->rank; d++)
        if (x->shape[d] != y->shape[d]) return 0;
    for (k = 0; k < nx; k++) {
        const char *ta, *tb;
        uint64_t sa, la, sb, lb;
        wsync__emap_piece_of(x, k, &ta, &sa, &la);
        wsync__emap_piece_of(y, k, &tb, &sb, &lb);
        if (strcmp(ta, tb) || sa != sb || la != lb) return 0;
    }
    return 1;
}

/* "parameter 'NAME' piece K of rank R" (the rank when there are several). */
static const char *wsync__eref_say(char *buf, size_t cap, const wsync_map_rank *ranks, size_t n_ranks,
                                   const wsync__eref *r)
{
    const wsync_map_param *q = &ranks[r->rank].params[r->p];
    char rk[40] = "";
    if (n_ranks > 1) snprintf(rk, sizeof rk, " of rank %zu", r->rank);
    if (r->k == SIZE_MAX) snprintf(buf, cap, "parameter '%.200s' (no pieces: the whole tensor)%s", q->name, rk);
    else snprintf(buf, cap, "parameter '%.200s' piece %zu%s", q->name, r->k, rk);
    return buf;
}

/* Sorted refs: overlaps within a rank (always; tied parameters excepted),
   tensors that none touches (cover 1), and, across all ranks (cover 2),
   each tensor split exactly once: parts that none covers, and two ranks'
   slices that overlap without being the same slice (a replica: a norm in
   every rank, or a KV head two ranks hold). Every ref of a tensor slices
   one dim (a whole tensor by name counts as any). */
static wsync_result wsync__emap_cover(const wsync_tensor *t, size_t n, const wsync_map_rank *ranks, size_t n_ranks,
                                      const wsync__eref *refs, size_t nr, int cover, wsync_error *err)
{
    size_t i = 0, ti, a, b, last;
    char sx[320], sy[320];
    for (ti = 0; ti < n; ti++) {
        uint64_t reach = 0, sdim;
        int dim = -1;
        size_t from = i;
        while (i < nr && refs[i].t == ti) i++;
        sdim = t[ti].rank ? t[ti].shape[0] : 1;
        for (a = from; a < i; a++) {
            const wsync__eref *r = &refs[a];
            if (r->k == SIZE_MAX) continue;
            if (dim >= 0 && (uint32_t)dim != r->dim)
                return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                   "%s: tensor '%s' sliced along dim %u here and %d elsewhere",
                                   wsync__eref_say(sx, sizeof sx, ranks, n_ranks, r), t[ti].name, r->dim, dim);
            dim = (int)r->dim;
            sdim = r->sdim;
        }
        /* overlaps: the refs are sorted by start */
        for (a = from; a < i; a++)
            for (b = a + 1; b < i && (refs[a].k == SIZE_MAX || refs[b].start < refs[a].start + refs[a].len); b++) {
                const wsync__eref *x = &refs[a], *y = &refs[b];
                int same = (x->start == y->start && x->len == y->len) ||
                           (!x->start && x->len == x->sdim && !y->start && y->len == y->sdim);
                if (x->rank != y->rank) {
                    if (cover < 2 || same) continue; /* a replica */
                    wsync__eref_say(sx, sizeof sx, ranks, n_ranks, x);
                    return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                                       "%s: [%llu, %llu) of tensor '%s' along dim %d overlaps %s's [%llu, %llu) "
                                       "(ranks split a tensor exactly once, or hold the same slice)",
                                       wsync__eref_say(sy, sizeof sy, ranks, n_ranks, y),
                                       (unsigned long long)y->start, (unsigned long long)(y->start + y->len),
                                       t[ti].name, dim < 0 ? 0 : dim, sx, (unsigned long long)x->start,
                                       (unsigned long long)(x->start + x->len));
                }
                if (x->p != y->p && same && wsync__emap_tied(&ranks[x->rank].params[x->p], &ranks[y->rank].params[y->p]))
                    continue;
                wsync__eref_say(sx, sizeof sx, ranks, n_ranks, x);
                return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0, "%s overlaps %s in tensor '%s' at "
                                   "%llu along dim %d", wsync__eref_say(sy, sizeof sy, ranks, n_ranks, y), sx,
                                   t[ti].name, (unsigned long long)y->start, dim < 0 ? 0 : dim);
            }
        if (!cover) continue;
        if (from == i)
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                               "checkpoint tensor '%s' is covered by no parameter", t[ti].name);
        if (cover < 2) continue;
        for (a = from, last = from; a < i; a++) {
            if (refs[a].k == SIZE_MAX) {
                reach = sdim;
                break;
            }
            if (refs[a].start > reach) break;
            if (refs[a].start + refs[a].len > reach) reach = refs[a].start + refs[a].len, last = a;
        }
        if (reach < sdim) {
            uint64_t to = a < i && refs[a].k != SIZE_MAX ? refs[a].start : sdim;
            return wsync__fail(err, WSYNC_ERR_LAYOUT, UINT64_MAX, NULL, 0,
                               "checkpoint tensor '%s': [%llu, %llu) along dim %d is covered by no parameter (%s %s)",
                               t[ti].name, (unsigned long long)reach, (unsigned long long)to, dim < 0 ? 0 : dim,
                               wsync__eref_say(sx, sizeof sx, ranks, n_ranks, reach ? &refs[last] : &refs[from]),
                               reach ? "ends there" : "starts after it");
        }
    }
    return WSYNC_OK;
}

static wsync_result wsync__emap_build(const wsync_allocator *al, const wsync_tensor *t, size_t n,
                                      const wsync_map_rank *ranks, size_t n_ranks, int cover, wsync__eref **out,
                                      size_t *nout, wsync_error *err)
{
    size_t cap = 0, nr = 0, r, j;
    wsync__eref *refs;
    wsync_result res = WSYNC_OK;
    for (r = 0; r < n_ranks; r++) {
        if (ranks[r].n && !ranks[r].params)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "rank %zu: no parameters", r);
        for (j = 0; j < ranks[r].n; j++) cap += ranks[r].params[j].n_pieces ? ranks[r].params[j].n_pieces : 1;
    }
    if (!(refs = (wsync__eref *)wsync__alloc(al, (cap + 1) * sizeof *refs)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "the engine map");
    for (r = 0; r < n_ranks && res == WSYNC_OK; r++)
        res = wsync__emap_refs(t, n, ranks[r].params, ranks[r].n, r, refs, &nr, err);
    if (res == WSYNC_OK) {
        if (nr) qsort(refs, nr, sizeof *refs, wsync__eref_cmp);
        res = wsync__emap_cover(t, n, ranks, n_ranks, refs, nr, cover, err);
    }
    if (res != WSYNC_OK) {
        wsync__free(al, refs);
        return res;
    }
    *out = refs;
    *nout = nr;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_engine_map_check(const wsync_tensor *tensors, size_t n, const wsync_map_rank *ranks,
                                              size_t n_ranks, wsync_error *err)
{
    wsync_allocator al;
    wsync__eref *refs = NULL;
    size_t nr = 0, r;
    wsync_result res;
    wsync__error_reset(err);
    if ((n && !tensors) || (n_ranks && !ranks))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_engine_map_check arguments");
    memset(&al, 0, sizeof al);
    /* each rank on its own first (its overlaps), then the union's coverage */
    for (r = 0; r < n_ranks; r++) {
        if ((res = wsync__emap_build(&al, tensors, n, &ranks[r], 1, 1, &refs, &nr, err)) != WSYNC_OK) {
            return res; /* it names the parameter and the piece */
        }
        wsync__free(&al, refs);
    }
    if ((res = wsync__emap_build(&al, tensors, n, ranks, n_ranks, 2, &refs, &nr, err)) != WSYNC_OK) return res;
    wsync__free(&al, refs);
    return WSYNC_OK;
}

static void wsync__eng_count(wsync_engine *e, const wsync__eref *r, uint64_t k, unsigned w)
{
    if (e->mark[r->p] != e->takes) {
        e->mark[r->p] = e->takes;
        e->st->params++;
    }
    e->st->calls++;
    e->st->positions += k;
    e->st->bytes += k * (8 + (uint64_t)w);
}

/* The first of n ascending positions at or above v. */
static uint64_t wsync__eng_lower(const uint64_t *pos, uint64_t n, uint64_t v)
{
    uint64_t a = 0, b = n, m;
    while (a < b) {
        m = a + (b - a) / 2;
        if (pos[m] < v) a = m + 1;
        else b = m;
    }
    return a;
}

/* A chunk through one ref straight into the parameter's data, no buffer
   (w a constant where inlined); *out: the positions written. */
WSYNC__INLINE void wsync__eng_direct_w(uint8_t *d, const wsync__eref *r, const uint64_t *pos, const uint8_t *vals,
                                       uint64_t count, uint64_t *out, const unsigned w)
{
    uint64_t blk = r->sdim * r->inner, pblk = r->pdim * r->inner, lo = r->start * r->inner,
             hi = (r->start + r->len) * r->inner, shift = r->off * r->inner, i, n = 0;
    if (count && pos[count - 1] < blk) { /* one block (dim 0 slices): a range of the positions */
        uint64_t a = wsync__eng_lower(pos, count, lo);
        for (i = a; i < count && pos[i] < hi; i++) memcpy(d + (pos[i] - lo + shift) * w, vals + i * w, w);
        n = i - a;
    } else {
        uint64_t o = 0, start = 0, end = 0;
        for (i = 0; i < count; i++) {
            uint64_t p = pos[i], x;
            if (p >= end) {
                o = p / blk;
                start = o * blk;
                end = start + blk;
            }
            x = p - start;
            if (x < lo || x >= hi) continue;
            memcpy(d + (o * pblk + x - lo + shift) * w, vals + i * w, w);
            n++;
        }
    }
    *out = n;
}

/* The chunk buffer to the engine: fn, or a scatter into the parameter's
   data; with g (WSYNC_ENGINE_MERGE) the k changes were written at the end
   of the ref's gather: kept there, the parameter pending. */
static int wsync__eng_flush(wsync_engine *e, const wsync__eref *r, wsync__egather *g, uint64_t k, unsigned w)
{
    const wsync_map_param *q = &e->p[r->p];
    wsync_param_changes c;
    int rc = 0;
    if (!k) return 0;
    if (g) {
        g->n += k;
        if (e->pmark[r->p] != e->takes) {
            e->pmark[r->p] = e->takes;
            e->pend[e->npend++] = r->p;
        }
        return 0;
    }
    wsync__eng_count(e, r, k, w);
    if (q->data) {
        uint8_t *d = (uint8_t *)q->data;
        uint64_t i;
        switch (w) {
        case 1: for (i = 0; i < k; i++) d[e->pos[i]] = e->val[i]; break;
        case 2: for (i = 0; i < k; i++) memcpy(d + e->pos[i] * 2, e->val + i * 2, 2); break;
        case 4: for (i = 0; i < k; i++) memcpy(d + e->pos[i] * 4, e->val + i * 4, 4); break;
        default: for (i = 0; i < k; i++) memcpy(d + e->pos[i] * w, e->val + i * w, w); break;
        }
        return 0;
    }
    memset(&c, 0, sizeof c);
    c.param = q;
    c.index = r->p;
    c.tensor = e->m->t[r->t].name;
    c.width = w;
    c.count = k;
    c.positions = e->pos;
    c.values = e->val;
    rc = e->fn(e->user, &c);
    return rc;
}

/* Room in a gather for `more` changes of w bytes (0, or 1 and e->oom). */
static int wsync__eng_room(wsync_engine *e, wsync__egather *g, uint64_t more, unsigned w)
{
    uint64_t need = g->n + more, cap;
    uint64_t *p;
    uint8_t *v;
    if (need <= g->cap) return 0;
    cap = g->cap > need / 2 ? 2 * g->cap : need;
    if (cap < 1024) cap = 1024;
    if (need < more || cap > (uint64_t)(SIZE_MAX / 8) - 1) return e->oom = 1;
    p = (uint64_t *)wsync__alloc(&e->a, (size_t)cap * 8);
    v = (uint8_t *)wsync__alloc(&e->a, (size_t)cap * w);
    if (!p || !v) {
        wsync__free(&e->a, p);
        wsync__free(&e->a, v);
        return e->oom = 1;
    }
    if (g->n) {
        memcpy(p, g->pos, (size_t)g->n * 8);
        memcpy(v, g->val, (size_t)g->n * w);
    }
    wsync__free(&e->a, g->pos);
    wsync__free(&e->a, g->val);
    e->gbytes += (cap - g->cap) * (8 + (uint64_t)w);
    g->pos = p;
    g->val = v;
    g->cap = cap;
    return 0;
}

/* One chunk of a tensor's changes through one ref. pos NULL: the whole
   tensor (vals: all of it). Without data the changes go to the chunk
   buffer and fn, or (WSYNC_ENGINE_MERGE) straight into the ref's gather. */
static int wsync__eng_ref(wsync_engine *e, const wsync__eref *r, const uint64_t *pos, const uint8_t *vals,
                          uint64_t count, unsigned w)
{
    uint64_t blk = r->sdim * r->inner, pblk = r->pdim * r->inner, lo = r->start * r->inner,
             hi = (r->start + r->len) * r->inner, shift = r->off * r->inner, k = 0, i, lim = e->chunk;
    uint64_t *P = e->pos;
    uint8_t *Q = e->val;
    wsync__egather *g = NULL;
    int rc;
    uint8_t *d = (uint8_t *)e->p[r->p].data;
    if (d && pos) {
        uint64_t n = 0;
        WSYNC__BY_WIDTH(w, wsync__eng_direct_w, d, r, pos, vals, count, &n);
        if (n) wsync__eng_count(e, r, n, w);
        return 0;
    }
    if (d) { /* whole, into the data: a run per block */
        uint64_t outer = count / (blk ? blk : 1), o;
        for (o = 0; o < outer; o++)
            memcpy(d + (o * pblk + shift) * w, vals + (o * blk + lo) * w, (size_t)((hi - lo) * w));
        if (outer) wsync__eng_count(e, r, outer * (hi - lo), w);
        return 0;
    }
    if (e->g) { /* merged: no call before the parameter is complete */
        g = &e->g[r - e->refs];
        if (wsync__eng_room(e, g, pos ? count : count / (blk ? blk : 1) * (hi - lo), w)) return 1;
        P = g->pos + g->n;
        Q = g->val + (size_t)g->n * w;
        lim = UINT64_MAX;
    }
    if (!pos) { /* whole: every element of the slice, block by block */
        uint64_t outer = count / (blk ? blk : 1), o, x;
        for (o = 0; o < outer; o++)
            for (x = lo; x < hi; x++) {
                P[k] = o * pblk + x - lo + shift;
                memcpy(Q + k * w, vals + (o * blk + x) * w, w);
                if (++k == lim) {
                    if ((rc = wsync__eng_flush(e, r, g, k, w)) != 0) return rc;
                    k = 0;
                }
            }
        return wsync__eng_flush(e, r, g, k, w);
    }
    if (blk == hi - lo + 0 && lo == 0 && pblk == blk && !shift) { /* the whole tensor, unshifted */
        for (i = 0; i < count; i += k) {
            k = count - i < lim ? count - i : lim;
            memcpy(P, pos + i, (size_t)k * 8);
            memcpy(Q, vals + i * w, (size_t)(k * w));
            if ((rc = wsync__eng_flush(e, r, g, k, w)) != 0) return rc;
        }
        return 0;
    }
    if (count && pos[count - 1] < blk) { /* one block (dim 0 slices): a range of the ascending positions */
        for (i = wsync__eng_lower(pos, count, lo); i < count && pos[i] < hi; i++) {
            P[k] = pos[i] - lo + shift;
            memcpy(Q + k * w, vals + i * w, w);
            if (++k == lim) {
                if ((rc = wsync__eng_flush(e, r, g, k, w)) != 0) return rc;
                k = 0;
            }
        }
        return wsync__eng_flush(e, r, g, k, w);
    }
    {
        uint64_t o = UINT64_MAX, base = 0, end = 0;
        for (i = 0; i < count; i++) {
            uint64_t p = pos[i], x;
            if (p >= end) {
                o = p / blk;
                base = o * blk;
                end = base + blk;
            }
            x = p - base;
            if (x < lo || x >= hi) continue;
            P[k] = o * pblk + x - lo + shift;
            memcpy(Q + k * w, vals + i * w, w);
            if (++k == lim) {
                if ((rc = wsync__eng_flush(e, r, g, k, w)) != 0) return rc;
                k = 0;
            }
        }
        return wsync__eng_flush(e, r, g, k, w);
    }
}

/* The gathers' memory kept across takes (above it, a parameter's is let
   go once handed), and one gather's let go. */
#define WSYNC__ENG_KEEP ((uint64_t)128 << 20)
static void wsync__eng_let_go(wsync_engine *e, wsync__egather *g, unsigned w)
{
    e->gbytes -= g->cap * (8 + (uint64_t)w);
    wsync__free(&e->a, g->pos);
    wsync__free(&e->a, g->val);
    g->pos = NULL;
    g->val = NULL;
    g->cap = 0;
}

/* WSYNC_ENGINE_MERGE: parameter p's gathered changes in one call,
   positions ascending: its refs in offset order (disjoint ascending ranges
   along dim 0; along another dim interleaved, a block at a time), written
   into the reserve's memory, or handed from the engine's (a lone ref's
   gather as it is). */
static int wsync__eng_emit1(wsync_engine *e, size_t p)
{
    const wsync_map_param *q = &e->p[p];
    size_t a = e->pfirst[p], b = e->pfirst[p + 1], j, nz = 0;
    const wsync__eref *r0 = &e->refs[e->pref[a]];
    wsync__egather *one = NULL;
    unsigned w = wsync_dtype_bits(q->dtype) / 8;
    uint64_t n = 0, *dp = NULL, at = 0;
    uint8_t *dv = NULL;
    void *dvv = NULL;
    wsync_param_changes c;
    int rc;
    for (j = a; j < b; j++)
        if (e->g[e->pref[j]].n) {
            one = &e->g[e->pref[j]];
            n += one->n;
            nz++;
        }
    if (!n) return 0;
    if (e->reserve && (rc = e->reserve(e->ruser, p, n, w, &dp, &dvv)) != 0) return rc;
    dv = (uint8_t *)dvv;
    if ((!dp || !dv) && nz == 1) {
        dp = one->pos;
        dv = one->val;
    } else if (!dp || !dv) {
        if (n > e->ocap) {
            wsync__free(&e->a, e->opos);
            wsync__free(&e->a, e->oval);
            e->ocap = 0;
            e->opos = (uint64_t *)wsync__alloc(&e->a, (size_t)n * 8);
            e->oval = (uint8_t *)wsync__alloc(&e->a, (size_t)n * 8);
            if (!e->opos || !e->oval) return e->oom = 1;
            e->ocap = n;
        }
        if (n > e->oused) e->oused = n;
        dp = e->opos;
        dv = e->oval;
    }
    if (dp != one->pos) {
        if (nz == 1 || r0->dim == 0 || r0->k == SIZE_MAX) { /* the refs' runs, in offset order */
            for (j = a; j < b; j++) {
                wsync__egather *g = &e->g[e->pref[j]];
                memcpy(dp + at, g->pos, (size_t)g->n * 8);
                memcpy(dv + at * w, g->val, (size_t)g->n * w);
                at += g->n;
            }
        } else { /* block by block: each ref's positions inside the block, in offset order */
            uint64_t pblk = r0->pdim * r0->inner, o;
            for (j = a; j < b; j++) e->g[e->pref[j]].used = 0; /* each ref's cursor */
            while (at < n) {
                o = UINT64_MAX;
                for (j = a; j < b; j++) {
                    wsync__egather *g = &e->g[e->pref[j]];
                    if (g->used < g->n && g->pos[g->used] / pblk < o) o = g->pos[g->used] / pblk;
                }
                for (j = a; j < b; j++) {
                    wsync__egather *g = &e->g[e->pref[j]];
                    uint64_t s = g->used;
                    while (g->used < g->n && g->pos[g->used] / pblk == o) g->used++;
                    memcpy(dp + at, g->pos + s, (size_t)(g->used - s) * 8);
                    memcpy(dv + at * w, g->val + (size_t)s * w, (size_t)(g->used - s) * w);
                    at += g->used - s;
                }
            }
        }
    }
    for (j = a; j < b; j++) { /* used: the most this take held */
        wsync__egather *g = &e->g[e->pref[j]];
        g->used = g->n;
        g->n = 0;
    }
    e->st->params++;
    e->st->calls++;
    e->st->positions += n;
    e->st->bytes += n * (8 + (uint64_t)w);
    memset(&c, 0, sizeof c);
    c.param = q;
    c.index = p;
    c.tensor = nz == 1 ? e->m->t[e->refs[one - e->g].t].name : NULL;
    c.width = w;
    c.count = n;
    c.positions = dp;
    c.values = dv;
    rc = e->fn(e->user, &c);
    for (j = a; j < b && e->gbytes > WSYNC__ENG_KEEP; j++) /* a large take's (a whole one's) let go at once */
        wsync__eng_let_go(e, &e->g[e->pref[j]], w);
    return rc;
}

/* WSYNC_ENGINE_MERGE: each pending parameter whose last tensor is below
   `below` (SIZE_MAX: all of them) handed in its one call. */
static int wsync__eng_emit(wsync_engine *e, size_t below)
{
    size_t i, k = 0;
    int rc = 0;
    for (i = 0; i < e->npend; i++) {
        size_t p = e->pend[i];
        if (rc || (below != SIZE_MAX && e->plast[p] >= below)) e->pend[k++] = p;
        else rc = wsync__eng_emit1(e, p);
    }
    e->npend = k;
    return rc;
}

/* The end call (WSYNC_ENGINE_END_CALL), made in the mirror's callback for
   the take's last chunk (under the mirror's lock, before it records the
   engine's step): the last chunk of the last tensor the mirror hands, the
   one after which no tensor's record would make a call (the predicate of
   wsync_mirror_take's loop and its handing). */
static int wsync__eng_final(const wsync_engine *e, size_t i)
{
    const wsync_mirror *m = e->m;
    size_t j;
    for (j = i + 1; j < m->n; j++) {
        const wsync__mrec *r = &m->rec[j];
        if (r->whole || (r->log ? r->llen != 0 : r->count != 0)) return 0;
    }
    return 1;
}

static int wsync__eng_end(wsync_engine *e)
{
    wsync_param_changes c;
    int rc;
    memset(&c, 0, sizeof c);
    c.index = SIZE_MAX;
    if ((rc = e->fn(e->user, &c)) != 0) e->end_rc = rc;
    return rc;
}

/* A refusal with WSYNC_ENGINE_END_CALL (the sink may have deferred all of
   the take) or WSYNC_ENGINE_MERGE (pending parameters were never handed):
   every tensor this take handed whole again (the mirror makes the refused
   one whole itself). */
static int wsync__eng_refused(wsync_engine *e, int rc)
{
    size_t j;
    if (e->flags & (WSYNC_ENGINE_END_CALL | WSYNC_ENGINE_MERGE))
        for (j = 0; j < e->m->n; j++)
            if (e->tmark[j] == e->takes) wsync__mrec_whole(&e->m->rec[j]);
    return rc;
}

/* The mirror's callback: one chunk of a tensor, to every ref of it. */
static int wsync__eng_changes(void *user, const wsync_changes *c)
{
    wsync_engine *e = (wsync_engine *)user;
    size_t j;
    int rc;
    if (c->index >= e->m->n) return 1;
    if (e->npend && (rc = wsync__eng_emit(e, c->index)) != 0) return wsync__eng_refused(e, rc);
    e->tmark[c->index] = e->takes;
    for (j = e->first[c->index]; j < e->first[c->index + 1]; j++)
        if ((rc = wsync__eng_ref(e, &e->refs[j], c->whole ? NULL : c->positions, (const uint8_t *)c->values,
                                 c->count, c->width)) != 0)
            return wsync__eng_refused(e, rc);
    if (!c->last) return 0;
    if (e->npend && (rc = wsync__eng_emit(e, wsync__eng_final(e, c->index) ? SIZE_MAX : c->index + 1)) != 0)
        return wsync__eng_refused(e, rc);
    if ((e->flags & WSYNC_ENGINE_END_CALL) && e->fn && wsync__eng_final(e, c->index) && (rc = wsync__eng_end(e)) != 0)
        return wsync__eng_refused(e, rc);
    return 0;
}

/* WSYNC_ENGINE_MERGE's state: a gather per ref, each parameter's refs by
   offset and its last tensor. */
static wsync_result wsync__eng_merge_open(wsync_engine *e)
{
    size_t n = e->np, i, j;
    e->g = (wsync__egather *)wsync__alloc(&e->a, (e->nrefs + 1) * sizeof *e->g);
    e->pref = (size_t *)wsync__alloc(&e->a, (e->nrefs + 1) * sizeof *e->pref);
    e->pfirst = (size_t *)wsync__alloc(&e->a, (n + 2) * sizeof *e->pfirst);
    e->plast = (size_t *)wsync__alloc(&e->a, (n + 1) * sizeof *e->plast);
    e->pmark = (uint64_t *)wsync__alloc(&e->a, (n + 1) * sizeof *e->pmark);
    e->pend = (size_t *)wsync__alloc(&e->a, (n + 1) * sizeof *e->pend);
    if (!e->g || !e->pref || !e->pfirst || !e->plast || !e->pmark || !e->pend) return WSYNC_ERR_OUT_OF_MEMORY;
    memset(e->g, 0, (e->nrefs + 1) * sizeof *e->g);
    memset(e->pmark, 0, (n + 1) * sizeof *e->pmark);
    memset(e->pfirst, 0, (n + 2) * sizeof *e->pfirst);
    memset(e->plast, 0, (n + 1) * sizeof *e->plast);
    for (j = 0; j < e->nrefs; j++) e->pfirst[e->refs[j].p + 2]++; /* counted, then placed by parameter */
    for (i = 0; i < n; i++) e->pfirst[i + 2] += e->pfirst[i + 1];
    for (j = 0; j < e->nrefs; j++) {
        size_t p = e->refs[j].p;
        e->pref[e->pfirst[p + 1]++] = j;
        if (e->refs[j].t > e->plast[p]) e->plast[p] = e->refs[j].t;
    }
    for (i = 0; i < n; i++) /* each parameter's few refs by offset */
        for (j = e->pfirst[i] + 1; j < e->pfirst[i + 1]; j++) {
            size_t k = j, x = e->pref[j];
            for (; k > e->pfirst[i] && e->refs[e->pref[k - 1]].off > e->refs[x].off; k--) e->pref[k] = e->pref[k - 1];
            e->pref[k] = x;
        }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_engine_open(wsync_mirror *m, const wsync_map_param *params, size_t n, unsigned flags,
                                         wsync_engine **out, wsync_error *err)
{
    wsync_engine *e;
    wsync_map_rank one;
    wsync_result r;
    size_t i;
    wsync__error_reset(err);
    if (!m || !out || (n && !params) || (flags & ~(WSYNC_MAP_SHARD | WSYNC_ENGINE_END_CALL | WSYNC_ENGINE_MERGE)))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_engine_open arguments");
    *out = NULL;
    for (i = 0; i < m->n; i++) {
        unsigned w = wsync_dtype_bits(m->t[i].dtype);
        if (w != 8 && w != 16 && w != 32 && w != 64)
            return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, m->t[i].name, strlen(m->t[i].name),
                               "tensor '%s': %s elements are not whole bytes; the engine map needs 1, 2, 4 or 8",
                               m->t[i].name, wsync_dtype_name(m->t[i].dtype));
    }
    if (!(e = (wsync_engine *)wsync__alloc(&m->a, sizeof *e)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "the engine map");
    memset(e, 0, sizeof *e);
    e->a = m->a;
    e->m = m;
    e->p = params;
    e->np = n;
    e->chunk = m->chunk;
    e->flags = flags;
    one.params = params;
    one.n = n;
    if ((r = wsync__emap_build(&e->a, m->t, m->n, &one, 1, flags & WSYNC_MAP_SHARD ? 1 : 2, &e->refs, &e->nrefs, err)) !=
        WSYNC_OK) {
        wsync_engine_close(e);
        return r;
    }
    e->first = (size_t *)wsync__alloc(&e->a, (m->n + 1) * sizeof *e->first);
    e->mark = (uint64_t *)wsync__alloc(&e->a, (n + 1) * sizeof *e->mark);
    e->tmark = (uint64_t *)wsync__alloc(&e->a, (m->n + 1) * sizeof *e->tmark);
    e->pos = (uint64_t *)wsync__alloc(&e->a, e->chunk * 8);
    e->val = (uint8_t *)wsync__alloc(&e->a, e->chunk * 8);
    if (!e->first || !e->mark || !e->tmark || !e->pos || !e->val) {
        wsync_engine_close(e);
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s", "the engine map");
    }
    memset(e->mark, 0, (n + 1) * sizeof *e->mark);
    memset(e->tmark, 0, (m->n + 1) * sizeof *e->tmark);
    {
        size_t j = 0;
        for (i = 0; i <= m->n; i++) {
            while (j < e->nrefs && e->refs[j].t < i) j++;
            e->first[i] = j;
        }
    }
    if ((flags & WSYNC_ENGINE_MERGE) && (r = wsync__eng_merge_open(e)) != WSYNC_OK) {
        wsync_engine_close(e);
        return wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s", "the engine map");
    }
    *out = e;
    return WSYNC_OK;
}

WSYNC_DEF void wsync_engine_reserve(wsync_engine *e, wsync_param_reserve_fn fn, void *user)
{
    if (!e) return;
    e->reserve = fn;
    e->ruser = user;
}

/* The gathers' memory after a take: kept while the take needed most of
   it, up to 2^23 changes a ref. */
static void wsync__eng_merge_trim(wsync_engine *e)
{
    size_t j;
    for (j = 0; j < e->nrefs; j++) {
        wsync__egather *g = &e->g[j];
        g->n = 0;
        if (g->cap > 2 * g->used + 1024 || g->cap > ((uint64_t)1 << 23))
            wsync__eng_let_go(e, g, wsync_dtype_bits(e->p[e->refs[j].p].dtype) / 8);
        g->used = 0;
    }
    if (e->ocap > 2 * e->oused + 1024 || e->ocap > ((uint64_t)1 << 23)) {
        wsync__free(&e->a, e->opos);
        wsync__free(&e->a, e->oval);
        e->opos = NULL;
        e->oval = NULL;
        e->ocap = 0;
    }
    e->oused = 0;
    e->npend = 0;
}

WSYNC_DEF wsync_result wsync_engine_take(wsync_engine *e, wsync_param_changes_fn fn, void *user,
                                         wsync_engine_stats *stats, wsync_error *err)
{
    wsync_engine_stats st;
    wsync_result r;
    size_t j;
    wsync__error_reset(err);
    memset(&st, 0, sizeof st);
    if (!e) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "no engine map");
    if (!fn)
        for (j = 0; j < e->np; j++)
            if (!e->p[j].data)
                return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0,
                                   "parameter '%s': no data to scatter into and no callback", e->p[j].name);
    e->fn = fn;
    e->user = user;
    e->st = &st;
    e->takes++;
    e->end_rc = 0;
    e->oom = 0;
    e->npend = 0;
    r = wsync_mirror_take(e->m, wsync__eng_changes, e, &st.mirror, err);
    if (r == WSYNC_OK && e->npend && wsync__eng_emit(e, SIZE_MAX) != 0) /* not reached: the last chunk hands them */
        r = wsync__fail(err, WSYNC_ERR_SINK, UINT64_MAX, NULL, 0, "%s", "the take's callback refused after the take");
    e->st = NULL;
    if (e->g) wsync__eng_merge_trim(e);
    if (r == WSYNC_ERR_SINK && e->oom)
        r = wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s",
                        "gathering the take's changes by parameter (WSYNC_ENGINE_MERGE): the engine has no step, "
                        "and the next take hands every tensor of this one again, whole");
    else if (r == WSYNC_ERR_SINK && e->end_rc)
        r = wsync__fail(err, WSYNC_ERR_SINK, UINT64_MAX, NULL, 0,
                        "the take's end call returned %d: the engine has no step, and the next take hands every "
                        "tensor of this one again, whole", e->end_rc);
    if (stats) *stats = st;
    return r;
}

WSYNC_DEF void wsync_engine_close(wsync_engine *e)
{
    wsync_allocator a;
    if (!e) return;
    a = e->a;
    wsync__free(&a, e->refs);
    wsync__free(&a, e->first);
    wsync__free(&a, e->mark);
    wsync__free(&a, e->tmark);
    wsync__free(&a, e->pos);
    wsync__free(&a, e->val);
    if (e->g) {
        size_t j;
        for (j = 0; j < e->nrefs; j++) {
            wsync__free(&a, e->g[j].pos);
            wsync__free(&a, e->g[j].val);
        }
    }
    wsync__free(&a, e->g);
    wsync__free(&a, e->pref);
    wsync__free(&a, e->pfirst);
    wsync__free(&a, e->plast);
    wsync__free(&a, e->pmark);
    wsync__free(&a, e->pend);
    wsync__free(&a, e->opos);
    wsync__free(&a, e->oval);
    wsync__free(&a, e);
}


/* ---------------------------------------------------------------------
   Model directories: read, publish, follow  >>dir
   --------------------------------------------------------------------- */

/* What this section needs beyond C99 (links, flock, fdopendir, O_NOFOLLOW)
   is POSIX.1-2008's, declared only when the program asks for it. */
#if WSYNC__POSIX && ((defined(_POSIX_VERSION) && _POSIX_VERSION >= 200809L) || defined(__APPLE__)) && \
    defined(O_NOFOLLOW) && defined(O_CLOEXEC) && defined(O_DIRECTORY)
#define WSYNC__MDIR 1
#include <fnmatch.h>
#include <signal.h>
#include <sys/file.h>
#else
#define WSYNC__MDIR 0
#endif

#if WSYNC__MDIR

/* ---- memory, names, files ---- */

static void *wsync__mdir_new(size_t n, size_t size)
{
    size_t bytes;
    void *p;
    if (!wsync_mul_size(n ? n : 1, size ? size : 1, &bytes) || !(p = wsync__alloc(NULL, bytes))) return NULL;
    memset(p, 0, bytes);
    return p;
}

static void wsync__mdir_del(void *p)
{
    wsync__free(NULL, p);
}

static char *wsync__mdir_dup(const char *s, size_t n)
{
    char *o = (char *)wsync__alloc(NULL, n + 1);
    if (!o) return NULL;
    memcpy(o, s, n);
    o[n] = 0;
    return o;
}

static wsync_result wsync__mdir_oom(wsync_error *err, const char *what)
{
    return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "out of memory (%s)", what);
}

/* A list of names (each its own allocation), sorted when asked. */
typedef struct wsync__mdir_names {
    char **v;
    size_t n, cap;
} wsync__mdir_names;

static int wsync__mdir_push(wsync__mdir_names *l, const char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = (char **)wsync__mdir_new(cap, sizeof *v);
        if (!v) return 0;
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        wsync__mdir_del(l->v);
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = wsync__mdir_dup(s, strlen(s)))) return 0;
    l->n++;
    return 1;
}

static void wsync__mdir_names_free(wsync__mdir_names *l)
{
    size_t i;
    for (i = 0; i < l->n; i++) wsync__mdir_del(l->v[i]);
    wsync__mdir_del(l->v);
    memset(l, 0, sizeof *l);
}

static int wsync__mdir_strcmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void wsync__mdir_sort(wsync__mdir_names *l)
{
    if (l->n > 1) qsort(l->v, l->n, sizeof *l->v, wsync__mdir_strcmp);
}

/* Sorted, each name once: n log n for any number of names (an index of
   20,000 shard names sorted after each new one took 12-16 s). */
static WSYNC__UNUSED void wsync__mdir_sort_unique(wsync__mdir_names *l)
{
    size_t i, k = 0;
    wsync__mdir_sort(l);
    for (i = 0; i < l->n; i++) {
        if (k && strcmp(l->v[k - 1], l->v[i]) == 0) wsync__mdir_del(l->v[i]);
        else l->v[k++] = l->v[i];
    }
    l->n = k;
}

static WSYNC__UNUSED int wsync__mdir_has(const wsync__mdir_names *l, const char *s)
{
    return l->n && bsearch(&s, l->v, l->n, sizeof *l->v, wsync__mdir_strcmp) != NULL;
}

static int wsync__mdir_join(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap;
}

static int wsync__mdir_ends(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int wsync__mdir_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* The directory holding `path` and the name in it ("." when none; "/x":
   the root). */
static void wsync__mdir_split(const char *path, char *dir, size_t cap, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, cap, ".");
        *base = path;
    } else {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1;
        snprintf(dir, cap, "%.*s", (int)n, path);
        *base = slash + 1;
    }
}

/* A rename is durable once its directory is synced: 1 synced (or a
   filesystem that cannot sync a directory), 0 not. */
static int wsync__mdir_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_CLOEXEC), ok;
    if (fd < 0) return 0;
    ok = fsync(fd) == 0 || errno == EINVAL;
    close(fd);
    return ok;
}

/* The regular files in `dir` (links followed: a Hugging Face cache links
   its snapshots' files to blobs), names not starting with '.', sorted.
   1 listed; 0 with errno set. */
static int wsync__mdir_list(const char *dir, wsync__mdir_names *out)
{
    DIR *d;
    struct dirent *e;
    char full[8192];
    memset(out, 0, sizeof *out);
    if (!(d = opendir(dir))) return 0;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (e->d_name[0] == '.') continue;
        if (!wsync__mdir_join(full, sizeof full, dir, e->d_name)) continue;
        if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (!wsync__mdir_push(out, e->d_name)) {
            closedir(d);
            wsync__mdir_names_free(out);
            errno = ENOMEM;
            return 0;
        }
    }
    closedir(d);
    wsync__mdir_sort(out);
    return 1;
}

/* A file that must be one of the directory's own (an index's shard, a
   carried file): a name, not a path, by the chain's rules for an anchor's
   objects. WSYNC_OK, or the rule it breaks (the message: the rule alone). */
static WSYNC__UNUSED wsync_result wsync__mdir_name_rule(const char *name, size_t len, wsync_error *err)
{
    if (memchr(name, 0, len) != NULL) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "a file name holding U+0000");
    if (strchr(name, '/') != NULL)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "'%.200s' is a path: files must be in the directory "
                               "itself (no '/')", name);
    if (strstr(name, "..") != NULL) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "'%.200s' holds '..'", name);
    return wsync_chain_file_name_check(name, err);
}

/* The whole file at `path` read into a new buffer (NUL after it), at most
   `max` bytes. */
static wsync_result wsync__mdir_slurp(const char *path, uint64_t max, char **out, size_t *len, wsync_error *err)
{
    wsync_mapped map;
    wsync_result r;
    *out = NULL;
    if ((r = wsync_file_map(path, &map, err)) != WSYNC_OK) return r;
    if (map.size > max) {
        wsync_file_unmap(&map);
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: %llu bytes, above the %llu it may have",
                           path, (unsigned long long)map.size, (unsigned long long)max);
    }
    if (!(*out = wsync__mdir_dup((const char *)map.bytes, (size_t)map.size))) {
        wsync_file_unmap(&map);
        return wsync__mdir_oom(err, path);
    }
    *len = (size_t)map.size;
    wsync_file_unmap(&map);
    return WSYNC_OK;
}

/* ---- JSON: the index and the step file, read with the tokenizer ---- */

#define WSYNC__MDIR_JS (WSYNC__JS_UTF8 | WSYNC__JS_PAIRS)
static const char wsync__mdir_js_oom[] = "out of memory";

/* The string at s[*i] decoded into a new buffer (NUL-terminated). */
static const char *wsync__mdir_jstr(const uint8_t *s, size_t n, size_t *i, char **out, size_t *len)
{
    size_t at = *i, k = 0;
    const char *why = wsync__js_string(s, n, &at, WSYNC__MDIR_JS, NULL, 0, &k);
    *out = NULL;
    if (why) {
        *i = at;
        return why;
    }
    if (!(*out = (char *)wsync__alloc(NULL, k + 1))) return wsync__mdir_js_oom;
    at = *i;
    wsync__js_string(s, n, &at, WSYNC__MDIR_JS, *out, k, &k);
    (*out)[k] = 0;
    *len = k;
    *i = at;
    return NULL;
}

/* A JSON failure of file `path` at byte `at`. */
static WSYNC__UNUSED wsync_result wsync__mdir_jfail(wsync_error *err, const char *path, size_t at, const char *why)
{
    if (why == wsync__mdir_js_oom) return wsync__mdir_oom(err, path);
    return wsync__fail(err, WSYNC_ERR_INVALID_JSON, UINT64_MAX, NULL, 0, "%s: not valid JSON: byte %llu: %s", path,
                       (unsigned long long)at, why);
}

/* An object's members one by one: at '{' (first 1) or after a member,
   moves to the next member's value (its decoded key in *key, free it) and
   returns 1, or past the closing '}' and returns 0; -1 with *why. */
static int wsync__mdir_jmember(const uint8_t *s, size_t n, size_t *i, int first, char **key, size_t *klen,
                               const char **why)
{
    *key = NULL;
    *i = wsync__js_ws(s, n, *i);
    if (first) {
        if (*i >= n || s[*i] != '{') return *why = "expected an object", -1;
        *i = wsync__js_ws(s, n, *i + 1);
        if (*i < n && s[*i] == '}') return ++*i, 0;
    } else {
        if (*i < n && s[*i] == '}') return ++*i, 0;
        if (*i >= n || s[*i] != ',') return *why = "expected ',' or '}'", -1;
        *i = wsync__js_ws(s, n, *i + 1);
    }
    if (*i >= n || s[*i] != '"') return *why = "an object's member needs a name (a string)", -1;
    if ((*why = wsync__mdir_jstr(s, n, i, key, klen)) != NULL) return -1;
    *i = wsync__js_ws(s, n, *i);
    if (*i >= n || s[*i] != ':') {
        wsync__mdir_del(*key);
        *key = NULL;
        return *why = "':' expected after a member's name", -1;
    }
    *i = wsync__js_ws(s, n, *i + 1);
    return 1;
}

static int wsync__mdir_key_is(const char *k, size_t kl, const char *lit)
{
    return kl == strlen(lit) && memcmp(k, lit, kl) == 0;
}

#ifndef WSYNC_NO_ENCODE /* the index: publishing's */
/* One entry of the index's weight_map. */
typedef struct wsync__mdir_wm {
    char *tensor, *shard;
    size_t tensor_len, shard_len;
    size_t at;                 /* its byte in the index */
} wsync__mdir_wm;

static int wsync__mdir_wm_cmp(const void *a, const void *b)
{
    const wsync__mdir_wm *x = (const wsync__mdir_wm *)a, *y = (const wsync__mdir_wm *)b;
    size_t n = x->tensor_len < y->tensor_len ? x->tensor_len : y->tensor_len;
    int c = memcmp(x->tensor, y->tensor, n);
    if (c) return c;
    return x->tensor_len < y->tensor_len ? -1 : x->tensor_len > y->tensor_len;
}

static void wsync__mdir_wm_free(wsync__mdir_wm *wm, size_t n)
{
    size_t i;
    for (i = 0; wm && i < n; i++) {
        wsync__mdir_del(wm[i].tensor);
        wsync__mdir_del(wm[i].shard);
    }
    wsync__mdir_del(wm);
}

/* The index at `ipath`: {"metadata": {"total_size": N, ...}, "weight_map":
   {tensor: shard file, ...}, anything else}. Its weight_map (sorted by
   tensor; a tensor twice refused), each shard name a plain .safetensors
   file name, each shard once and sorted into `shards`, every one a file of
   the directory (`entries`). */
static wsync_result wsync__mdir_read_index(const char *ipath, const wsync__mdir_names *entries, wsync__mdir_wm **out,
                                           size_t *n_out, wsync__mdir_names *shards, wsync_error *err)
{
    char *text = NULL, *key = NULL;
    const uint8_t *s;
    size_t n = 0, i = 0, klen = 0, cap = 0, nw = 0, k;
    wsync__mdir_wm *wm = NULL;
    const char *why = NULL;
    int m, seen_wm = 0, seen_meta = 0;
    wsync_result r;
    *out = NULL;
    *n_out = 0;
    memset(shards, 0, sizeof *shards);
    if ((r = wsync__mdir_slurp(ipath, WSYNC_DIR_INDEX_MAX, &text, &n, err)) != WSYNC_OK) return r;
    s = (const uint8_t *)text;
    for (m = wsync__mdir_jmember(s, n, &i, 1, &key, &klen, &why); m > 0;
         m = wsync__mdir_jmember(s, n, &i, 0, &key, &klen, &why)) {
        size_t at = i;
        if (wsync__mdir_key_is(key, klen, "weight_map") || wsync__mdir_key_is(key, klen, "metadata")) {
            int is_wm = key[0] == 'w', mm;
            char *k2 = NULL;
            size_t k2len = 0;
            if (is_wm ? seen_wm++ : seen_meta++) {
                r = wsync__fail(err, WSYNC_ERR_INVALID_JSON, UINT64_MAX, NULL, 0, "%s: byte %llu: the index names "
                                "\"%s\" twice", ipath, (unsigned long long)at, key);
                goto done;
            }
            if (i >= n || s[i] != '{') {
                r = wsync__fail(err, WSYNC_ERR_INVALID_JSON, UINT64_MAX, NULL, 0, is_wm ? "%s: byte %llu: the index "
                                "needs \"weight_map\", an object from tensor name to shard file" : "%s: byte %llu: "
                                "\"metadata\" must be an object", ipath, (unsigned long long)at);
                goto done;
            }
            for (mm = wsync__mdir_jmember(s, n, &i, 1, &k2, &k2len, &why); mm > 0;
                 mm = wsync__mdir_jmember(s, n, &i, 0, &k2, &k2len, &why)) {
                size_t vat = i;
                if (!is_wm) {
                    if (wsync__mdir_key_is(k2, k2len, "total_size")) {
                        int is_uint = 0, ovf = 0;
                        uint64_t v;
                        if (i >= n || (s[i] != '-' && !wsync__mdir_digit(s[i])) ||
                            (why = wsync__js_number(s, n, &i, &is_uint, &v, &ovf)) != NULL || !is_uint || ovf) {
                            wsync__mdir_del(k2);
                            if (why) goto bad_json;
                            r = wsync__fail(err, WSYNC_ERR_INVALID_JSON, UINT64_MAX, NULL, 0, "%s: byte %llu: "
                                            "\"metadata\".\"total_size\" must be a whole number of bytes", ipath,
                                            (unsigned long long)vat);
                            goto done;
                        }
                    } else if ((why = wsync__js_skip(s, n, &i, WSYNC__MDIR_JS, 2, 64)) != NULL) {
                        wsync__mdir_del(k2);
                        goto bad_json;
                    }
                    wsync__mdir_del(k2);
                    continue;
                }
                if (nw == cap) {
                    size_t c2 = cap ? 2 * cap : 64;
                    wsync__mdir_wm *v2 = (wsync__mdir_wm *)wsync__mdir_new(c2, sizeof *v2);
                    if (!v2) {
                        wsync__mdir_del(k2);
                        r = wsync__mdir_oom(err, ipath);
                        goto done;
                    }
                    if (nw) memcpy(v2, wm, nw * sizeof *v2);
                    wsync__mdir_del(wm);
                    wm = v2;
                    cap = c2;
                }
                wm[nw].tensor = k2;
                wm[nw].tensor_len = k2len;
                wm[nw].at = vat;
                nw++;
                if (memchr(k2, 0, k2len) != NULL) {
                    r = wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s: \"weight_map\" names a "
                                    "tensor '%s' whose name holds U+0000", ipath, k2);
                    goto done;
                }
                if (i >= n || s[i] != '"') {
                    r = wsync__fail(err, WSYNC_ERR_INVALID_JSON, UINT64_MAX, NULL, 0, "%s: \"weight_map\" maps tensor "
                                    "'%.200s' to something other than a file name", ipath, k2);
                    goto done;
                }
                if ((why = wsync__mdir_jstr(s, n, &i, &wm[nw - 1].shard, &wm[nw - 1].shard_len)) != NULL) goto bad_json;
            }
            if (mm < 0) goto bad_json;
        } else if ((why = wsync__js_skip(s, n, &i, WSYNC__MDIR_JS, 1, 64)) != NULL) {
            goto bad_json;
        }
        wsync__mdir_del(key);
        key = NULL;
    }
    if (m < 0) goto bad_json;
    i = wsync__js_ws(s, n, i);
    if (i != n) {
        why = "something follows the value";
        goto bad_json;
    }
    if (!seen_wm) {
        r = wsync__fail(err, WSYNC_ERR_INVALID_JSON, UINT64_MAX, NULL, 0, "%s: the index needs \"weight_map\", an "
                        "object from tensor name to shard file", ipath);
        goto done;
    }
    if (!nw) {
        r = wsync__fail(err, WSYNC_ERR_INVALID_JSON, UINT64_MAX, NULL, 0, "%s: \"weight_map\" names no tensor", ipath);
        goto done;
    }
    for (k = 0; k < nw; k++) {
        const wsync__mdir_wm *e = &wm[k];
        wsync_error why2;
        if (wsync__mdir_name_rule(e->shard, e->shard_len, &why2) != WSYNC_OK) {
            r = wsync__fail(err, why2.code, UINT64_MAX, NULL, 0, "%s: \"weight_map\" maps tensor '%.150s' to a file "
                            "name the directory cannot hold: %s", ipath, e->tensor, why2.message);
            goto done;
        }
        if (!wsync__mdir_ends(e->shard, ".safetensors")) {
            r = wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s: \"weight_map\" maps tensor '%.150s' "
                            "to '%.150s', not a .safetensors file", ipath, e->tensor, e->shard);
            goto done;
        }
        if (!wsync__mdir_push(shards, e->shard)) {
            r = wsync__mdir_oom(err, "shard names");
            goto done;
        }
    }
    qsort(wm, nw, sizeof *wm, wsync__mdir_wm_cmp);
    for (k = 1; k < nw; k++)
        if (wsync__mdir_wm_cmp(&wm[k - 1], &wm[k]) == 0) {
            r = wsync__fail(err, WSYNC_ERR_INVALID_JSON, UINT64_MAX, NULL, 0, "%s: byte %llu: \"weight_map\" names "
                            "the tensor '%.200s' twice", ipath,
                            (unsigned long long)(wm[k].at > wm[k - 1].at ? wm[k].at : wm[k - 1].at), wm[k].tensor);
            goto done;
        }
    wsync__mdir_sort_unique(shards);
    for (k = 0; k < shards->n; k++)
        if (!wsync__mdir_has(entries, shards->v[k])) {
            r = wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "%s: the index names the shard '%s', which "
                            "is not a file in the directory (a missing shard)", ipath, shards->v[k]);
            goto done;
        }
    *out = wm;
    *n_out = nw;
    wm = NULL;
    nw = 0;
    r = WSYNC_OK;
    goto done;
bad_json:
    r = wsync__mdir_jfail(err, ipath, i, why);
done:
    wsync__mdir_del(key);
    wsync__mdir_wm_free(wm, nw);
    wsync__mdir_del(text);
    if (r != WSYNC_OK) wsync__mdir_names_free(shards);
    return r;
}

#endif /* WSYNC_NO_ENCODE */

/* hex digits into bytes: 1 when s is exactly 2 * n of them. */
static int wsync__mdir_unhex(const char *s, size_t len, uint8_t *out, size_t n)
{
    size_t i;
    if (len != 2 * n) return 0;
    for (i = 0; i < 2 * n; i++) {
        int v = wsync__hexval((unsigned char)s[i]);
        if (v < 0) return 0;
        if (i % 2 == 0) out[i / 2] = (uint8_t)(v << 4);
        else out[i / 2] |= (uint8_t)v;
    }
    return 1;
}

/* What a version's WSYNC_DIR_STEP_FILE says. */
typedef struct wsync__mdir_stepfile {
    uint64_t step, state;      /* state: 0 when absent */
    int has_chain;
    uint8_t chain[WSYNC_CHAIN_ID_SIZE];
} wsync__mdir_stepfile;

/* dir's WSYNC_DIR_STEP_FILE: {"step": N, "state": "16 hex", "chain": "32
   hex"} (state and chain optional, other keys ignored). */
static wsync_result wsync__mdir_read_stepfile(const char *dir, wsync__mdir_stepfile *sf, wsync_error *err)
{
    char full[8192], *text = NULL, *key = NULL;
    const uint8_t *s;
    size_t n = 0, i = 0, klen = 0;
    const char *why = NULL;
    int m, has_step = 0;
    wsync_result r;
    memset(sf, 0, sizeof *sf);
    if (!wsync__mdir_join(full, sizeof full, dir, WSYNC_DIR_STEP_FILE))
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the path is too long", dir);
    if ((r = wsync__mdir_slurp(full, 4096, &text, &n, err)) != WSYNC_OK) return r;
    s = (const uint8_t *)text;
    for (m = wsync__mdir_jmember(s, n, &i, 1, &key, &klen, &why); m > 0;
         m = wsync__mdir_jmember(s, n, &i, 0, &key, &klen, &why)) {
        if (wsync__mdir_key_is(key, klen, "step")) {
            int is_uint = 0, ovf = 0;
            if (i >= n || (s[i] != '-' && !wsync__mdir_digit(s[i])) ||
                (why = wsync__js_number(s, n, &i, &is_uint, &sf->step, &ovf)) != NULL || !is_uint || ovf ||
                sf->step > WSYNC_STEP_MAX) {
                if (!why) why = "\"step\" is not a step number";
                break;
            }
            has_step = 1;
        } else if (wsync__mdir_key_is(key, klen, "state") || wsync__mdir_key_is(key, klen, "chain")) {
            char *v = NULL;
            size_t vl = 0;
            int is_chain = key[0] == 'c';
            uint8_t b[WSYNC_CHAIN_ID_SIZE];
            if (i >= n || s[i] != '"') {
                why = is_chain ? "\"chain\" is not a string" : "\"state\" is not a string";
                break;
            }
            if ((why = wsync__mdir_jstr(s, n, &i, &v, &vl)) != NULL) break;
            if (is_chain) {
                if (!wsync__mdir_unhex(v, vl, sf->chain, sizeof sf->chain)) why = "\"chain\" is not 32 hex digits";
                sf->has_chain = 1;
            } else if (wsync__mdir_unhex(v, vl, b, 8)) {
                int k;
                for (k = 0; k < 8; k++) sf->state = sf->state << 8 | b[k];
            }
            wsync__mdir_del(v);
            if (why) break;
        } else if ((why = wsync__js_skip(s, n, &i, WSYNC__MDIR_JS, 1, 16)) != NULL) {
            break;
        }
        wsync__mdir_del(key);
        key = NULL;
    }
    wsync__mdir_del(key);
    if (!why && m == 0 && wsync__js_ws(s, n, i) != n) why = "something follows the value";
    if (!why && !has_step) why = "no \"step\" that is a step number";
    wsync__mdir_del(text);
    if (why == wsync__mdir_js_oom) return wsync__mdir_oom(err, full);
    if (why) {
        sf->has_chain = 0;
        return wsync__fail(err, WSYNC_ERR_INVALID_METADATA, UINT64_MAX, NULL, 0, "%s: not a step file: byte %llu: %s",
                           full, (unsigned long long)i, why);
    }
    return WSYNC_OK;
}

static int wsync__mdir_has_stepfile(const char *dir)
{
    char full[8192];
    struct stat sb;
    return wsync__mdir_join(full, sizeof full, dir, WSYNC_DIR_STEP_FILE) && stat(full, &sb) == 0 && S_ISREG(sb.st_mode);
}

#ifndef WSYNC_NO_ENCODE
/* A decimal step ("7"), as a trainer's __metadata__ "step" holds it. */
static int wsync__mdir_parse_step(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s) return 0;
    for (; *s; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return v <= WSYNC_STEP_MAX;
}
#endif

/* ---- publishing: a checkpoint directory read and checked ---- */

#ifndef WSYNC_NO_ENCODE
/* The small files a checkpoint carries besides its shards: every one of
   these that the directory holds travels with each anchor. */
static const char *const wsync__mdir_plain[] = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja",
    "chat_template.json", "preprocessor_config.json", NULL};

/* What a wsync_dir_checkpoint holds besides its public fields. */
typedef struct wsync__mdir_ck {
    size_t n_shards, n_files;
    wsync_mapped *maps;        /* the shards' */
    wsync_st_file *sts;
    char **shard_names;
    wsync_mapped *fmaps;       /* the carried files' */
    char **file_names;
} wsync__mdir_ck;

typedef struct wsync__mdir_ref {
    const char *name;
    size_t shard;
} wsync__mdir_ref;

static int wsync__mdir_ref_cmp(const void *a, const void *b)
{
    return strcmp(((const wsync__mdir_ref *)a)->name, ((const wsync__mdir_ref *)b)->name);
}

WSYNC_DEF void wsync_dir_checkpoint_free(wsync_dir_checkpoint *c)
{
    wsync__mdir_ck *p;
    size_t i;
    if (!c) return;
    if ((p = (wsync__mdir_ck *)c->priv) != NULL) {
        for (i = 0; i < p->n_shards; i++) {
            wsync_st_free(&p->sts[i]);
            wsync_file_unmap(&p->maps[i]);
        }
        for (i = 0; p->shard_names && i < c->n_shards; i++) wsync__mdir_del(p->shard_names[i]);
        for (i = 0; i < p->n_files; i++) {
            wsync_file_unmap(&p->fmaps[i]);
            wsync__mdir_del(p->file_names[i]);
        }
        wsync__mdir_del(p->maps);
        wsync__mdir_del(p->sts);
        wsync__mdir_del(p->shard_names);
        wsync__mdir_del(p->fmaps);
        wsync__mdir_del(p->file_names);
        wsync__mdir_del(p);
    }
    wsync__mdir_del(c->tensors);
    wsync__mdir_del(c->shards);
    wsync__mdir_del(c->files);
    wsync__mdir_del(c->unmatched);
    memset(c, 0, sizeof *c);
}

/* The files carried with each anchor: the documented ones present, the
   index, and what the patterns match (not shards, not the step file). */
static wsync_result wsync__mdir_carried(const wsync__mdir_names *entries,
                                        const wsync__mdir_names *shards, int has_index, const char *const *include,
                                        size_t n_include, wsync_dir_checkpoint *c, wsync__mdir_names *out)
{
    size_t i, k;
    int oom = 0;
    memset(out, 0, sizeof *out);
    for (i = 0; wsync__mdir_plain[i]; i++)
        if (wsync__mdir_has(entries, wsync__mdir_plain[i])) oom |= !wsync__mdir_push(out, wsync__mdir_plain[i]);
    if (has_index) oom |= !wsync__mdir_push(out, WSYNC_DIR_INDEX);
    for (k = 0; k < n_include; k++) {
        int matched = 0;
        for (i = 0; i < entries->n; i++) {
            const char *nm = entries->v[i];
            if (fnmatch(include[k], nm, 0) != 0) continue;
            matched = 1;
            if (wsync__mdir_has(shards, nm)) continue;
            if (strcmp(nm, WSYNC_DIR_STEP_FILE) == 0) { /* reserved: each pulled version's own */
                c->skipped_step_file = 1;
                continue;
            }
            oom |= !wsync__mdir_push(out, nm);
        }
        if (!matched) c->unmatched[k] = 1;
    }
    wsync__mdir_sort_unique(out);
    if (oom) {
        wsync__mdir_names_free(out);
        return WSYNC_ERR_OUT_OF_MEMORY;
    }
    return WSYNC_OK;
}

/* A shard mapped, parsed, its names C strings, one tensor at least. */
static wsync_result wsync__mdir_load_shard(const char *full, wsync_mapped *map, wsync_st_file *st, wsync_error *err)
{
    wsync_result r;
    if ((r = wsync_file_map(full, map, err)) != WSYNC_OK) return r;
    if ((r = wsync_st_parse(map->bytes, map->size, NULL, st, err)) != WSYNC_OK) {
        char m[sizeof err->message];
        wsync_file_unmap(map);
        memcpy(m, err->message, sizeof m);
        return wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s: a shard that is not valid safetensors: %s", full, m);
    }
    if ((r = wsync_st_check_names(st, err)) != WSYNC_OK || !st->n_tensors) {
        char m[sizeof err->message];
        memcpy(m, err->message, sizeof m);
        wsync_st_free(st);
        wsync_file_unmap(map);
        if (r != WSYNC_OK) return wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s: %s", full, m);
        return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s: a shard holding no tensor", full);
    }
    return WSYNC_OK;
}

/* The step a directory claims: its shards' __metadata__ "step" when all
   claim one, else its WSYNC_DIR_STEP_FILE's (a pulled version relayed);
   none when the two disagree. */
static void wsync__mdir_claimed_step(const char *dir, const wsync__mdir_names *entries, wsync_dir_checkpoint *c,
                                     const wsync__mdir_ck *p)
{
    size_t i;
    uint64_t step = 0, x = 0;
    int all = c->n_shards > 0;
    wsync__mdir_stepfile sf;
    for (i = 0; all && i < c->n_shards; i++) {
        if (!wsync__mdir_parse_step(wsync_st_metadata_get(&p->sts[i], "step"), &x) || (i && x != step)) all = 0;
        step = x;
    }
    if (wsync__mdir_has(entries, WSYNC_DIR_STEP_FILE) && wsync__mdir_read_stepfile(dir, &sf, NULL) == WSYNC_OK) {
        if (all && sf.step != step) return;
        step = sf.step;
        all = 1;
    }
    c->has_step = all;
    c->step = all ? step : 0;
}

WSYNC_DEF wsync_result wsync_dir_read(const char *dir, const char *const *include, size_t n_include,
                                      wsync_dir_checkpoint *out, wsync_error *err)
{
    wsync__mdir_names entries, shards, files;
    wsync__mdir_wm *wm = NULL;
    size_t n_wm = 0, i, k, at;
    wsync__mdir_ref *refs = NULL;
    wsync__mdir_ck *p;
    unsigned char *seen = NULL;
    char ipath[8192], full[8192];
    wsync_error why;
    int has_index;
    wsync_result r = WSYNC_OK;
    wsync__error_reset(err);
    if (!out) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_dir_read needs an output");
    memset(out, 0, sizeof *out);
    if (!dir || (n_include && !include))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_dir_read needs a directory");
    memset(&shards, 0, sizeof shards);
    memset(&files, 0, sizeof files);
    for (k = 0; k < n_include; k++)
        if (!include[k] || !*include[k] || strchr(include[k], '/'))
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "include pattern '%s': a pattern "
                               "for file names in the directory (no '/')", include[k] ? include[k] : "(null)");
    if (!wsync__mdir_list(dir, &entries))
        return wsync__fail(err, errno == ENOENT ? WSYNC_ERR_NOT_FOUND : WSYNC_ERR_IO, UINT64_MAX, NULL, 0,
                           "%s: cannot list the directory: %s", dir, strerror(errno));
    if (!(p = (wsync__mdir_ck *)wsync__mdir_new(1, sizeof *p)) ||
        !(out->unmatched = (unsigned char *)wsync__mdir_new(n_include + 1, 1))) {
        wsync__mdir_del(p);
        wsync__mdir_names_free(&entries);
        return wsync__mdir_oom(err, dir);
    }
    out->priv = p;
    has_index = wsync__mdir_has(&entries, WSYNC_DIR_INDEX);
    if (!wsync__mdir_join(ipath, sizeof ipath, dir, WSYNC_DIR_INDEX)) {
        r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the path is too long", dir);
        goto done;
    }
    /* the shards: the index's files, or every *.safetensors */
    if (has_index) {
        if ((r = wsync__mdir_read_index(ipath, &entries, &wm, &n_wm, &shards, err)) != WSYNC_OK) goto done;
        for (i = 0; i < entries.n; i++)
            if (wsync__mdir_ends(entries.v[i], ".safetensors") && !wsync__mdir_has(&shards, entries.v[i])) {
                r = wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s/%s: a .safetensors file that %s "
                                "does not name (with an index, the shards are exactly the files it names)", dir,
                                entries.v[i], WSYNC_DIR_INDEX);
                goto done;
            }
    } else {
        for (i = 0; i < entries.n; i++)
            if (wsync__mdir_ends(entries.v[i], ".safetensors") && !wsync__mdir_push(&shards, entries.v[i])) {
                r = wsync__mdir_oom(err, "shard names");
                goto done;
            }
        if (!shards.n) {
            r = wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "%s: no *.safetensors file: a model "
                            "directory holds its shards (model.safetensors, or model-00001-of-0000N.safetensors with "
                            "the index)", dir);
            goto done;
        }
    }
    for (i = 0; i < shards.n; i++)
        if (wsync__mdir_name_rule(shards.v[i], strlen(shards.v[i]), &why) != WSYNC_OK) {
            r = wsync__fail(err, why.code, UINT64_MAX, NULL, 0, "%s/%s: a shard's name: %s", dir, shards.v[i],
                            why.message);
            goto done;
        }
    /* every shard parses, names every tensor by a C string, holds one at least */
    p->maps = (wsync_mapped *)wsync__mdir_new(shards.n, sizeof *p->maps);
    p->sts = (wsync_st_file *)wsync__mdir_new(shards.n, sizeof *p->sts);
    p->shard_names = (char **)wsync__mdir_new(shards.n, sizeof *p->shard_names);
    out->shards = (wsync_anchor_shard *)wsync__mdir_new(shards.n, sizeof *out->shards);
    if (!p->maps || !p->sts || !p->shard_names || !out->shards) {
        r = wsync__mdir_oom(err, "shards");
        goto done;
    }
    out->n_shards = shards.n;
    for (i = 0; i < shards.n; i++)
        if (!(p->shard_names[i] = wsync__mdir_dup(shards.v[i], strlen(shards.v[i])))) {
            r = wsync__mdir_oom(err, "shard names");
            goto done;
        }
    for (i = 0; i < out->n_shards; i++) {
        if (!wsync__mdir_join(full, sizeof full, dir, p->shard_names[i])) {
            r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the path is too long", dir);
            goto done;
        }
        if ((r = wsync__mdir_load_shard(full, &p->maps[i], &p->sts[i], err)) != WSYNC_OK) goto done;
        p->n_shards = i + 1;
        out->shards[i].name = p->shard_names[i];
        out->shards[i].first = out->n_tensors;
        out->shards[i].count = p->sts[i].n_tensors;
        out->shards[i].metadata = p->sts[i].metadata; /* the trainer's keys, in order, into the anchor */
        out->shards[i].n_metadata = p->sts[i].n_metadata;
        out->n_tensors += p->sts[i].n_tensors;
    }
    /* the tensors, shard after shard; no tensor in two shards */
    refs = (wsync__mdir_ref *)wsync__mdir_new(out->n_tensors + 1, sizeof *refs);
    out->tensors = (wsync_tensor *)wsync__mdir_new(out->n_tensors + 1, sizeof *out->tensors);
    if (!refs || !out->tensors) {
        r = wsync__mdir_oom(err, "tensors");
        goto done;
    }
    for (i = 0, at = 0; i < out->n_shards; i++)
        for (k = 0; k < p->sts[i].n_tensors; k++, at++) {
            const wsync_st_tensor *s = &p->sts[i].tensors[k];
            wsync_tensor *t = &out->tensors[at];
            t->name = s->name;
            t->dtype = s->dtype;
            t->rank = s->rank;
            t->shape = s->shape;
            t->data = (void *)s->data; /* read-only: the mapping */
            t->nbytes = s->end - s->begin;
            out->bytes += t->nbytes;
            refs[at].name = t->name;
            refs[at].shard = i;
        }
    qsort(refs, out->n_tensors, sizeof *refs, wsync__mdir_ref_cmp);
    for (i = 1; i < out->n_tensors; i++)
        if (strcmp(refs[i - 1].name, refs[i].name) == 0) {
            size_t a = refs[i - 1].shard < refs[i].shard ? refs[i - 1].shard : refs[i].shard;
            size_t b = refs[i - 1].shard < refs[i].shard ? refs[i].shard : refs[i - 1].shard;
            r = wsync__fail(err, WSYNC_ERR_DUPLICATE_KEY, UINT64_MAX, NULL, 0, "%s/%s: tensor '%.200s' is in two "
                            "shards, %s and %s (a tensor lives in one shard)", dir, out->shards[b].name, refs[i].name,
                            out->shards[a].name, out->shards[b].name);
            goto done;
        }
    /* the index names exactly the shards' tensors, each with its shard */
    if (has_index) {
        if (!(seen = (unsigned char *)wsync__mdir_new(out->n_tensors + 1, 1))) {
            r = wsync__mdir_oom(err, "tensor list");
            goto done;
        }
        for (i = 0; i < n_wm; i++) {
            wsync__mdir_ref key, *hit;
            key.name = wm[i].tensor;
            key.shard = 0;
            hit = (wsync__mdir_ref *)bsearch(&key, refs, out->n_tensors, sizeof *refs, wsync__mdir_ref_cmp);
            if (!hit) {
                r = wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "%s: the index names tensor '%.200s' "
                                "(in %.100s), which no shard holds", ipath, wm[i].tensor, wm[i].shard);
                goto done;
            }
            if (strcmp(out->shards[hit->shard].name, wm[i].shard) != 0) {
                r = wsync__fail(err, WSYNC_ERR_INVALID_METADATA, UINT64_MAX, NULL, 0, "%s: the index maps tensor "
                                "'%.200s' to %.100s, but %.100s holds it", ipath, wm[i].tensor, wm[i].shard,
                                out->shards[hit->shard].name);
                goto done;
            }
            seen[hit - refs] = 1;
        }
        for (i = 0; i < out->n_tensors; i++)
            if (!seen[i]) {
                r = wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "%s: the index does not name tensor "
                                "'%.200s', which %s holds (it must name every tensor)", ipath, refs[i].name,
                                out->shards[refs[i].shard].name);
                goto done;
            }
    }
    /* the files carried with every anchor */
    if (wsync__mdir_carried(&entries, &shards, has_index, include, n_include, out, &files) != WSYNC_OK) {
        r = wsync__mdir_oom(err, "file names");
        goto done;
    }
    if (out->n_shards + files.n > WSYNC_CHAIN_FILES_MAX) {
        r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: %zu shards and %zu files, above the %d "
                        "objects an anchor holds", dir, out->n_shards, files.n, WSYNC_CHAIN_FILES_MAX);
        goto done;
    }
    out->files = (wsync_anchor_file *)wsync__mdir_new(files.n + 1, sizeof *out->files);
    p->fmaps = (wsync_mapped *)wsync__mdir_new(files.n + 1, sizeof *p->fmaps);
    p->file_names = (char **)wsync__mdir_new(files.n + 1, sizeof *p->file_names);
    if (!out->files || !p->fmaps || !p->file_names) {
        r = wsync__mdir_oom(err, "files");
        goto done;
    }
    for (i = 0; i < files.n; i++) {
        if (!wsync__mdir_join(full, sizeof full, dir, files.v[i])) {
            r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the path is too long", dir);
            goto done;
        }
        if (wsync__mdir_name_rule(files.v[i], strlen(files.v[i]), &why) != WSYNC_OK) {
            r = wsync__fail(err, why.code, UINT64_MAX, NULL, 0, "%s: a carried file's name: %s", full, why.message);
            goto done;
        }
        if ((r = wsync_file_map(full, &p->fmaps[i], err)) != WSYNC_OK) goto done;
        p->file_names[i] = files.v[i];
        files.v[i] = NULL;
        p->n_files = out->n_files = i + 1;
        if (p->fmaps[i].size > WSYNC_DIR_FILE_MAX) {
            r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: %llu bytes, above the %llu a carried file "
                            "may have", full, (unsigned long long)p->fmaps[i].size,
                            (unsigned long long)WSYNC_DIR_FILE_MAX);
            goto done;
        }
        out->files[i].name = p->file_names[i];
        out->files[i].data = p->fmaps[i].bytes;
        out->files[i].size = p->fmaps[i].size;
    }
    wsync__mdir_claimed_step(dir, &entries, out, p);
done:
    if (r != WSYNC_OK) wsync_dir_checkpoint_free(out);
    wsync__mdir_wm_free(wm, n_wm);
    wsync__mdir_del(refs);
    wsync__mdir_del(seen);
    wsync__mdir_names_free(&entries);
    wsync__mdir_names_free(&shards);
    wsync__mdir_names_free(&files);
    return r;
}

WSYNC_DEF wsync_result wsync_dir_publish(wsync_publisher *pub, uint64_t step, const wsync_dir_checkpoint *c,
                                         wsync_publish_stats *stats, wsync_error *err)
{
    wsync_result r;
    wsync__error_reset(err);
    if (!pub || !c || !c->n_shards)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_dir_publish needs a publisher and a directory read by wsync_dir_read");
    if (step == WSYNC_STEP_LATEST) {
        if (!c->has_step)
            return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "the directory claims no "
                               "step (its shards' __metadata__ \"step\" missing or not all the same, and no "
                               WSYNC_DIR_STEP_FILE " that says one): give the step");
        step = c->step;
    }
    if ((r = wsync_publisher_set_layout(pub, c->shards, c->n_shards, c->files, c->n_files, err)) != WSYNC_OK) return r;
    return wsync_publish(pub, step, c->tensors, c->n_tensors, stats, err);
}
#endif /* WSYNC_NO_ENCODE */

/* ---- following: the model in memory, the layout of its shards ---- */

/* The model as one safetensors image in a private buffer: the subscriber
   patches the tensors (views into buf) in place, and a version is written
   from it. */
typedef struct wsync__mdir_image {
    uint8_t *buf;
    uint64_t size;
    wsync_st_file st;
    wsync_tensor *t;           /* st.n_tensors views into buf */
    int has_step;
    uint64_t step;
    int has_chain;             /* the signed chain the step came from (a version's
                                  step file "chain"; written after a verified sync) */
    uint8_t chain[WSYNC_CHAIN_ID_SIZE];
} wsync__mdir_image;

/* A version's shards: which tensors of the image each one holds, in the
   order it writes them, and the trainer's __metadata__ keys. */
typedef struct wsync__mdir_shard {
    char name[WSYNC_CHAIN_FILE_NAME_MAX];
    size_t *idx;               /* indices into the image's tensors */
    size_t n;
    int has_meta;              /* 0: written with "format" "pt" and "step" */
    wsync_st_kv *meta;         /* else these (before an anchor's "wsync"), one allocation */
    size_t n_meta;
} wsync__mdir_shard;
typedef struct wsync__mdir_layout {
    wsync__mdir_shard *shards;
    size_t n_shards;
    int from_anchor;           /* the layout of anchor anchor_step (else the local version's) */
    uint64_t anchor_step;
    char linked[512];          /* the version the link named when last read or switched ("": none) */
} wsync__mdir_layout;

static void wsync__mdir_image_free(wsync__mdir_image *im)
{
    wsync__mdir_del(im->t);
    wsync_st_free(&im->st);
    wsync__mdir_del(im->buf);
    memset(im, 0, sizeof *im);
}

/* Parses im->buf (filled by the caller) and builds the views. */
static wsync_result wsync__mdir_image_parse(const char *what, wsync__mdir_image *im, wsync_error *err)
{
    size_t i;
    wsync_result r;
    char m[sizeof err->message];
    if ((r = wsync_st_parse(im->buf, im->size, NULL, &im->st, err)) != WSYNC_OK ||
        (r = wsync_st_check_names(&im->st, err)) != WSYNC_OK) {
        memcpy(m, err->message, sizeof m);
        return wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s: %s", what, m);
    }
    if (!(im->t = (wsync_tensor *)wsync__mdir_new(im->st.n_tensors + 1, sizeof *im->t)))
        return wsync__mdir_oom(err, "tensor views");
    for (i = 0; i < im->st.n_tensors; i++) {
        const wsync_st_tensor *s = &im->st.tensors[i];
        im->t[i].name = s->name;
        im->t[i].dtype = s->dtype;
        im->t[i].rank = s->rank;
        im->t[i].shape = s->shape;
        im->t[i].data = im->buf + (s->data - im->buf); /* our buffer: writable */
        im->t[i].nbytes = s->end - s->begin;
    }
    return WSYNC_OK;
}

static void wsync__mdir_layout_free(wsync__mdir_layout *lay)
{
    size_t i;
    for (i = 0; i < lay->n_shards; i++) {
        wsync__mdir_del(lay->shards[i].idx);
        wsync__mdir_del(lay->shards[i].meta);
    }
    wsync__mdir_del(lay->shards);
    memset(lay, 0, sizeof *lay);
}

/* Shard sh's metadata: st's keys in order, up to an anchor's "wsync" (the
   publisher's own from there on). 0 when out of memory. */
static int wsync__mdir_shard_meta(wsync__mdir_shard *sh, const wsync_st_file *st)
{
    size_t j, m = 0, strings = 0;
    char *at;
    while (m < st->n_metadata && !(st->metadata[m].key_len == 5 && memcmp(st->metadata[m].key, "wsync", 5) == 0))
        strings += st->metadata[m].key_len + st->metadata[m].value_len + 2, m++;
    sh->has_meta = 1;
    sh->n_meta = 0;
    if (!(sh->meta = (wsync_st_kv *)wsync__alloc(NULL, m * sizeof *sh->meta + strings + 1))) return 0;
    at = (char *)(sh->meta + m);
    for (j = 0; j < m; j++) {
        const wsync_st_kv *kv = &st->metadata[j];
        wsync_st_kv *o = &sh->meta[j];
        memcpy(at, kv->key, kv->key_len), at[kv->key_len] = 0, o->key = at, o->key_len = kv->key_len;
        at += kv->key_len + 1;
        memcpy(at, kv->value, kv->value_len), at[kv->value_len] = 0, o->value = at, o->value_len = kv->value_len;
        at += kv->value_len + 1;
    }
    sh->n_meta = m;
    return 1;
}

/* A layout of n shards, shard k holding counts[k] consecutive tensors,
   its metadata sts[k]'s (sts NULL: none kept). */
static int wsync__mdir_layout_runs(wsync__mdir_layout *lay, size_t n, char (*names)[WSYNC_CHAIN_FILE_NAME_MAX],
                                   const size_t *counts, const wsync_st_file *sts)
{
    size_t k, j, at = 0;
    memset(lay, 0, sizeof *lay);
    if (!(lay->shards = (wsync__mdir_shard *)wsync__mdir_new(n + 1, sizeof *lay->shards))) return 0;
    lay->n_shards = n;
    for (k = 0; k < n; k++) {
        memcpy(lay->shards[k].name, names[k], sizeof names[k]);
        if (!(lay->shards[k].idx = (size_t *)wsync__mdir_new(counts[k] + 1, sizeof(size_t)))) {
            wsync__mdir_layout_free(lay);
            return 0;
        }
        for (j = 0; j < counts[k]; j++) lay->shards[k].idx[j] = at++;
        lay->shards[k].n = counts[k];
        if (sts && !wsync__mdir_shard_meta(&lay->shards[k], &sts[k])) {
            wsync__mdir_layout_free(lay);
            return 0;
        }
    }
    return 1;
}

/* A zeroed image holding the tensors d (data not read), in that order. */
static wsync_result wsync__mdir_image_build(const char *what, const wsync_st_tensor_desc *d, size_t n,
                                            wsync__mdir_image *im, wsync_error *err)
{
    wsync_st_writer w;
    wsync_buffer b;
    uint64_t size = 0;
    wsync_result r;
    memset(im, 0, sizeof *im);
    if ((r = wsync_st_write_size(d, n, NULL, 0, &size, err)) != WSYNC_OK) return r;
    if (size > (uint64_t)SIZE_MAX - 1 || !(im->buf = (uint8_t *)wsync__mdir_new((size_t)size + 1, 1)))
        return wsync__fail(err, WSYNC_ERR_OUT_OF_MEMORY, UINT64_MAX, NULL, 0, "%s: %llu bytes for the model", what,
                           (unsigned long long)size);
    im->size = size;
    b.bytes = im->buf, b.cap = (size_t)size, b.len = 0;
    if ((r = wsync_st_writer_begin(&w, d, n, NULL, 0, wsync_buffer_sink, &b, NULL, err)) != WSYNC_OK ||
        (r = wsync__mdir_image_parse(what, im, err)) != WSYNC_OK) {
        wsync__mdir_image_free(im);
        return r;
    }
    return WSYNC_OK;
}

/* The descriptions of a parsed file's tensors, appended at d + *at. */
static void wsync__mdir_descs(const wsync_st_file *st, wsync_st_tensor_desc *d, size_t *at)
{
    size_t j;
    for (j = 0; j < st->n_tensors; j++, (*at)++) {
        const wsync_st_tensor *t = &st->tensors[j];
        d[*at].name = t->name;
        d[*at].name_len = t->name_len;
        d[*at].dtype = t->dtype;
        d[*at].rank = t->rank;
        d[*at].shape = t->shape;
        d[*at].data = NULL;
        d[*at].nbytes = t->end - t->begin;
    }
}

/* The store key of an entry's object: prefix / entry key + name. */
static int wsync__mdir_key(char *buf, size_t cap, const wsync_chain_options *co, const wsync_chain_entry *e,
                           const char *name)
{
    int n = co->prefix && *co->prefix ? snprintf(buf, cap, "%s/%s%s", co->prefix, e->key, name)
                                      : snprintf(buf, cap, "%s%s", e->key, name);
    return n > 0 && (size_t)n < cap;
}

/* The header of the object `key` (`bytes` long, as HEAD says) parsed into
   st by wsync_st_parse_header: two ranged gets, the 8-byte length and the
   header, never the data (st keeps names and shapes; no data views). */
static wsync_result wsync__mdir_fetch_header(const wsync_store *s, const char *key, uint64_t bytes, wsync_st_file *st,
                                             wsync_error *err)
{
    wsync_buffer b;
    uint8_t *buf;
    uint64_t need = 0, size = 0;
    wsync_result r;
    char m[sizeof err->message];
    memset(st, 0, sizeof *st);
    if (!(buf = (uint8_t *)wsync__alloc(NULL, 8))) return wsync__mdir_oom(err, key);
    b.bytes = buf, b.cap = 8, b.len = 0;
    if ((r = s->get(s->user, key, 0, 8, wsync_buffer_sink, &b, &size, err)) != WSYNC_OK) {
        wsync__mdir_del(buf);
        memcpy(m, err->message, sizeof m);
        return wsync__fail(err, r, UINT64_MAX, NULL, 0, "reading the header of %s: %s", key, m);
    }
    if (size != bytes) {
        wsync__mdir_del(buf);
        return wsync__fail(err, WSYNC_ERR_SIZE_MISMATCH, UINT64_MAX, NULL, 0, "%s: the object is %llu bytes, HEAD "
                           "says %llu", key, (unsigned long long)size, (unsigned long long)bytes);
    }
    r = wsync_st_parse_header(buf, b.len, size, NULL, st, &need, err);
    if (r == WSYNC_ERR_TRUNCATED && need > 8 && need <= size && need <= (uint64_t)SIZE_MAX - 1) {
        uint8_t *more = (uint8_t *)wsync__alloc(NULL, (size_t)need);
        if (!more) {
            wsync__mdir_del(buf);
            return wsync__mdir_oom(err, key);
        }
        memcpy(more, buf, 8);
        wsync__mdir_del(buf);
        buf = more;
        b.bytes = buf + 8, b.cap = (size_t)need - 8, b.len = 0;
        if ((r = s->get(s->user, key, 8, need - 8, wsync_buffer_sink, &b, NULL, err)) != WSYNC_OK) {
            wsync__mdir_del(buf);
            memcpy(m, err->message, sizeof m);
            return wsync__fail(err, r, UINT64_MAX, NULL, 0, "reading the header of %s: %s", key, m);
        }
        r = wsync_st_parse_header(buf, 8 + b.len, size, NULL, st, &need, err);
    }
    wsync__mdir_del(buf);
    if (r == WSYNC_OK && (r = wsync_st_check_names(st, err)) != WSYNC_OK) wsync_st_free(st);
    if (r != WSYNC_OK) {
        memset(st, 0, sizeof *st);
        memcpy(m, err->message, sizeof m);
        return wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s: invalid safetensors: %s", key, m);
    }
    return WSYNC_OK;
}

/* The headers of an anchor's shards (a directory's files with tensors; a
   file anchor: its one object). */
static wsync_result wsync__mdir_fetch_headers(const wsync_store *s, const wsync_chain_options *co,
                                              const wsync_chain_entry *e, wsync_st_file **sts, size_t *n_shards,
                                              size_t *n_tensors, wsync_error *err)
{
    char key[1400];
    size_t i, ns = 0;
    wsync_result r = WSYNC_OK;
    *n_tensors = 0;
    *n_shards = 0;
    if (!e->n_files && e->key[0] && e->key[strlen(e->key) - 1] == '/')
        /* a directory anchor known from a listing alone: HEAD lists its files */
        return wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0,
                           "anchor %s is a model directory's, and only HEAD names its files; the store shows "
                           "no HEAD (a publisher still writing its first step, or HEAD lost): retry once HEAD "
                           "is written",
                           e->key);
    if (!(*sts = (wsync_st_file *)wsync__mdir_new(e->n_files + 1, sizeof **sts))) return wsync__mdir_oom(err, e->key);
    if (!e->n_files) {
        if (!wsync__mdir_key(key, sizeof key, co, e, ""))
            r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the key is too long", e->key);
        else if ((r = wsync__mdir_fetch_header(s, key, e->bytes, &(*sts)[0], err)) == WSYNC_OK)
            ns = 1, *n_tensors = (*sts)[0].n_tensors;
    }
    for (i = 0; r == WSYNC_OK && i < e->n_files; i++) {
        const wsync_chain_file *f = &e->files[i];
        if (!f->tensors) continue;
        if (!wsync__mdir_key(key, sizeof key, co, e, f->name)) {
            r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the key is too long", f->name);
            break;
        }
        if ((r = wsync__mdir_fetch_header(s, key, f->bytes, &(*sts)[ns], err)) != WSYNC_OK) break;
        ns++;
        if ((*sts)[ns - 1].n_tensors != f->tensors) {
            r = wsync__fail(err, WSYNC_ERR_INVALID_HEADER, UINT64_MAX, NULL, 0, "%s: the shard holds %zu tensors, HEAD "
                            "says %llu", key, (*sts)[ns - 1].n_tensors, (unsigned long long)f->tensors);
            break;
        }
        *n_tensors += (*sts)[ns - 1].n_tensors;
    }
    if (r != WSYNC_OK) {
        for (i = 0; i < ns; i++) wsync_st_free(&(*sts)[i]);
        wsync__mdir_del(*sts);
        *sts = NULL;
        return r;
    }
    *n_shards = ns;
    return WSYNC_OK;
}

/* The model of anchor e as one image, data zeroed, the tensors in shard
   order; lay (when not NULL) gets a directory anchor's layout. */
static wsync_result wsync__mdir_image_from_entry(const wsync_store *s, const wsync_chain_options *co,
                                                 const wsync_chain_entry *e, wsync__mdir_image *im,
                                                 wsync__mdir_layout *lay, wsync_error *err)
{
    wsync_st_file *sts = NULL;
    wsync_st_tensor_desc *d = NULL;
    char (*names)[WSYNC_CHAIN_FILE_NAME_MAX] = NULL;
    size_t *counts = NULL, ns = 0, nt = 0, i, at = 0, k = 0;
    wsync_result r;
    memset(im, 0, sizeof *im);
    if (lay) memset(lay, 0, sizeof *lay);
    if ((r = wsync__mdir_fetch_headers(s, co, e, &sts, &ns, &nt, err)) != WSYNC_OK) return r;
    d = (wsync_st_tensor_desc *)wsync__mdir_new(nt + 1, sizeof *d);
    names = (char (*)[WSYNC_CHAIN_FILE_NAME_MAX])wsync__mdir_new(ns + 1, sizeof *names);
    counts = (size_t *)wsync__mdir_new(ns + 1, sizeof *counts);
    if (!d || !names || !counts) {
        r = wsync__mdir_oom(err, e->key);
        goto done;
    }
    for (i = 0; i < ns; i++) wsync__mdir_descs(&sts[i], d, &at);
    for (i = 0; i < e->n_files; i++)
        if (e->files[i].tensors) {
            memcpy(names[k], e->files[i].name, sizeof names[k]);
            counts[k] = sts[k].n_tensors;
            k++;
        }
    if ((r = wsync__mdir_image_build(e->key, d, nt, im, err)) != WSYNC_OK) goto done;
    if (lay && e->n_files) {
        if (!wsync__mdir_layout_runs(lay, ns, names, counts, sts)) {
            wsync__mdir_image_free(im);
            r = wsync__mdir_oom(err, "layout");
            goto done;
        }
        lay->from_anchor = 1;
        lay->anchor_step = e->step;
    }
done:
    for (i = 0; i < ns; i++) wsync_st_free(&sts[i]);
    wsync__mdir_del(sts);
    wsync__mdir_del(d);
    wsync__mdir_del(names);
    wsync__mdir_del(counts);
    return r;
}

/* The newest anchor at or before `limit` (WSYNC_STEP_LATEST: HEAD's step)
   as a zeroed image (and its layout); *anchor its step. */
static wsync_result wsync__mdir_image_from_anchor(const wsync_store *s, const wsync_chain_options *co, uint64_t limit,
                                                  wsync__mdir_image *im, wsync__mdir_layout *lay, uint64_t *anchor,
                                                  wsync_error *err)
{
    wsync_chain_info info;
    wsync_result r;
    size_t i, at = 0;
    int found = 0;
    memset(im, 0, sizeof *im);
    if (lay) memset(lay, 0, sizeof *lay);
    if ((r = wsync_chain_read(s, co, &info, err)) != WSYNC_OK) return r;
    if (limit == WSYNC_STEP_LATEST) limit = info.head_step;
    for (i = 0; i < info.n_entries; i++) /* ascending by step: the last match is the newest */
        if (info.entries[i].kind == WSYNC_CHAIN_ANCHOR && info.entries[i].step <= limit) found = 1, at = i;
    if (!found) {
        wsync_chain_info_free(&info);
        return wsync__fail(err, WSYNC_ERR_NO_PATH, UINT64_MAX, NULL, 0, "the chain has no anchor at or before step "
                           "%llu to take the tensors' layout from", (unsigned long long)limit);
    }
    if (anchor) *anchor = info.entries[at].step;
    r = wsync__mdir_image_from_entry(s, co, &info.entries[at], im, lay, err);
    wsync_chain_info_free(&info);
    return r;
}

/* The layout of anchor e's shards over an image that holds their tensors
   (matched by name): a new anchor may group them otherwise. */
static wsync_result wsync__mdir_layout_from_entry(const wsync_store *s, const wsync_chain_options *co,
                                                  const wsync_chain_entry *e, const wsync__mdir_image *im,
                                                  wsync__mdir_layout *lay, wsync_error *err)
{
    wsync_st_file *sts = NULL;
    unsigned char *used = NULL;
    size_t ns = 0, nt = 0, i, j, k = 0;
    wsync_result r;
    memset(lay, 0, sizeof *lay);
    if ((r = wsync__mdir_fetch_headers(s, co, e, &sts, &ns, &nt, err)) != WSYNC_OK) return r;
    if (nt != im->st.n_tensors) {
        r = wsync__fail(err, WSYNC_ERR_INVALID_HEADER, UINT64_MAX, NULL, 0, "%s: the anchor's shards hold %zu tensors, "
                        "the model %zu", e->key, nt, im->st.n_tensors);
        goto done;
    }
    used = (unsigned char *)wsync__mdir_new(nt + 1, 1);
    lay->shards = (wsync__mdir_shard *)wsync__mdir_new(ns + 1, sizeof *lay->shards);
    if (!used || !lay->shards) {
        r = wsync__mdir_oom(err, "layout");
        goto done;
    }
    lay->n_shards = ns;
    for (i = 0; i < e->n_files; i++) {
        wsync__mdir_shard *sh;
        if (!e->files[i].tensors) continue;
        sh = &lay->shards[k];
        memcpy(sh->name, e->files[i].name, sizeof sh->name);
        if (!(sh->idx = (size_t *)wsync__mdir_new(sts[k].n_tensors + 1, sizeof(size_t))) ||
            !wsync__mdir_shard_meta(sh, &sts[k])) {
            r = wsync__mdir_oom(err, "layout");
            goto done;
        }
        for (j = 0; j < sts[k].n_tensors; j++) {
            const wsync_st_tensor *t = &sts[k].tensors[j], *mine = wsync_st_find(&im->st, t->name);
            size_t at;
            if (!mine || mine->dtype != t->dtype || mine->rank != t->rank ||
                (t->rank && memcmp(mine->shape, t->shape, t->rank * sizeof *t->shape) != 0) ||
                used[at = (size_t)(mine - im->st.tensors)]) {
                r = wsync__fail(err, WSYNC_ERR_INVALID_HEADER, UINT64_MAX, NULL, 0, "%s: tensor '%.200s' of the "
                                "anchor's shard is not one of the model's (or not with its dtype and shape)",
                                e->files[i].name, t->name);
                goto done;
            }
            used[at] = 1;
            sh->idx[sh->n++] = at;
        }
        k++;
    }
    lay->from_anchor = 1;
    lay->anchor_step = e->step;
done:
    if (r != WSYNC_OK) wsync__mdir_layout_free(lay);
    for (i = 0; i < ns; i++) wsync_st_free(&sts[i]);
    wsync__mdir_del(sts);
    wsync__mdir_del(used);
    return r;
}

/* s is digits (at least one), then optionally "." and digits: the rest of
   a version's name after "BASE.step_". */
static int wsync__mdir_vsuffix(const char *s, const char **end)
{
    const char *p = s;
    while (wsync__mdir_digit((unsigned char)*p)) p++;
    if (p == s) return 0;
    if (*p == '.' && wsync__mdir_digit((unsigned char)p[1])) {
        p++;
        while (wsync__mdir_digit((unsigned char)*p)) p++;
    }
    *end = p;
    return 1;
}

/* name is BASE.step_N[.K] */
static int wsync__mdir_is_version(const char *name, const char *base)
{
    size_t blen = strlen(base);
    const char *rest;
    return strncmp(name, base, blen) == 0 && strncmp(name + blen, ".step_", 6) == 0 &&
           wsync__mdir_vsuffix(name + blen + 6, &rest) && !*rest;
}

/* The version `path` links to, as one image (its shards, by name order)
   with the step of its step file. */
static wsync_result wsync__mdir_image_from_link(const char *path, wsync__mdir_image *im, wsync__mdir_layout *lay,
                                                wsync_error *err)
{
    wsync__mdir_names entries, shards;
    wsync_mapped *maps = NULL;
    wsync_st_file *sts = NULL;
    wsync_st_tensor_desc *d = NULL;
    char (*names)[WSYNC_CHAIN_FILE_NAME_MAX] = NULL;
    size_t *counts = NULL, i, j, at = 0, nt = 0, n_open = 0;
    char full[8192], m[sizeof err->message];
    wsync__mdir_stepfile sf;
    wsync_result r = WSYNC_OK;
    memset(im, 0, sizeof *im);
    memset(lay, 0, sizeof *lay);
    memset(&shards, 0, sizeof shards);
    if ((r = wsync__mdir_read_stepfile(path, &sf, err)) != WSYNC_OK) return r;
    if (!wsync__mdir_list(path, &entries))
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "%s: cannot list the directory: %s", path,
                           strerror(errno));
    for (i = 0; i < entries.n; i++)
        if (wsync__mdir_ends(entries.v[i], ".safetensors") && strlen(entries.v[i]) < WSYNC_CHAIN_FILE_NAME_MAX &&
            !wsync__mdir_push(&shards, entries.v[i])) {
            r = wsync__mdir_oom(err, "names");
            goto done;
        }
    if (!shards.n) {
        r = wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "%s: the version holds no *.safetensors shard",
                        path);
        goto done;
    }
    maps = (wsync_mapped *)wsync__mdir_new(shards.n, sizeof *maps);
    sts = (wsync_st_file *)wsync__mdir_new(shards.n, sizeof *sts);
    names = (char (*)[WSYNC_CHAIN_FILE_NAME_MAX])wsync__mdir_new(shards.n, sizeof *names);
    counts = (size_t *)wsync__mdir_new(shards.n, sizeof *counts);
    if (!maps || !sts || !names || !counts) {
        r = wsync__mdir_oom(err, "shards");
        goto done;
    }
    for (i = 0; i < shards.n; i++) {
        if (!wsync__mdir_join(full, sizeof full, path, shards.v[i])) {
            r = wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the path is too long", path);
            goto done;
        }
        if ((r = wsync_file_map(full, &maps[i], err)) != WSYNC_OK) goto done;
        if ((r = wsync_st_parse(maps[i].bytes, maps[i].size, NULL, &sts[i], err)) != WSYNC_OK) {
            wsync_file_unmap(&maps[i]);
            memcpy(m, err->message, sizeof m);
            r = wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s: invalid safetensors: %s", full, m);
            goto done;
        }
        n_open = i + 1;
        if ((r = wsync_st_check_names(&sts[i], err)) != WSYNC_OK) {
            memcpy(m, err->message, sizeof m);
            r = wsync__fail(err, r, UINT64_MAX, NULL, 0, "%s: %s", full, m);
            goto done;
        }
        memcpy(names[i], shards.v[i], strlen(shards.v[i]) + 1);
        counts[i] = sts[i].n_tensors;
        nt += sts[i].n_tensors;
    }
    if (!(d = (wsync_st_tensor_desc *)wsync__mdir_new(nt + 1, sizeof *d))) {
        r = wsync__mdir_oom(err, "tensors");
        goto done;
    }
    for (i = 0; i < shards.n; i++) wsync__mdir_descs(&sts[i], d, &at);
    if ((r = wsync__mdir_image_build(path, d, nt, im, err)) != WSYNC_OK) goto done;
    if (!wsync__mdir_layout_runs(lay, shards.n, names, counts, sts)) {
        wsync__mdir_image_free(im);
        r = wsync__mdir_oom(err, "layout");
        goto done;
    }
    /* the data, shard by shard: each mapping let go once copied */
    for (i = 0, at = 0; i < shards.n; i++) {
        for (j = 0; j < sts[i].n_tensors; j++, at++)
            if (im->t[at].nbytes) memcpy(im->t[at].data, sts[i].tensors[j].data, (size_t)im->t[at].nbytes);
        wsync_st_free(&sts[i]);
        wsync_file_unmap(&maps[i]);
    }
    n_open = 0;
    {
        ssize_t rl = readlink(path, lay->linked, sizeof lay->linked - 1);
        lay->linked[rl > 0 ? rl : 0] = 0;
    }
    im->has_step = 1;
    im->step = sf.step;
    im->has_chain = sf.has_chain;
    memcpy(im->chain, sf.chain, sizeof im->chain);
done:
    for (i = 0; i < n_open; i++) {
        wsync_st_free(&sts[i]);
        wsync_file_unmap(&maps[i]);
    }
    wsync__mdir_del(maps);
    wsync__mdir_del(sts);
    wsync__mdir_del(d);
    wsync__mdir_del(names);
    wsync__mdir_del(counts);
    wsync__mdir_names_free(&entries);
    wsync__mdir_names_free(&shards);
    return r;
}

/* ---- versions on disk ---- */

/* Removes a directory of plain files (a version, or one being built): its
   entries, never following a link or entering a subdirectory, then itself. */
static int wsync__mdir_remove_tree(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), ok = 1;
    DIR *d;
    struct dirent *e;
    if (fd < 0) return 0;
    if (!(d = fdopendir(fd))) {
        close(fd);
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (unlinkat(fd, e->d_name, 0) != 0) ok = 0;
    }
    closedir(d);
    return rmdir(path) == 0 && ok;
}

/* A pid in s ending the string: > 0, not ours, and gone. */
static int wsync__mdir_dead_pid(const char *s)
{
    char *end;
    long pid;
    if (!wsync__mdir_digit((unsigned char)*s)) return 0;
    errno = 0;
    pid = strtol(s, &end, 10);
    if (*end || errno || pid <= 0 || pid == (long)getpid()) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* An old version is first renamed to a temporary of ours (BASE.step_N.tmp.
   PID), then removed: a run killed half way through leaves a temporary of a
   dead process, which the next run removes, not a version without its step
   file that no run would recognize as ours. */
static void wsync__mdir_remove_version(const char *full)
{
    char tmp[8300];
    struct stat sb;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", full, (long)getpid()) >= (int)sizeof tmp) return;
    if (lstat(tmp, &sb) == 0) wsync__mdir_remove_tree(tmp);
    if (rename(full, tmp) != 0) return;
    if (getenv("WSYNC_TEST_DIE_IN_REMOVAL")) { /* tests: a run killed with the removal half done */
        char step_file[8400];
        snprintf(step_file, sizeof step_file, "%s/%s", tmp, WSYNC_DIR_STEP_FILE);
        unlink(step_file);
        raise(SIGKILL);
    }
    wsync__mdir_remove_tree(tmp);
}

/* The versions beside the link (BASE in `parent`) other than keep1, keep2
   and the one the link names now, that wsync made, are removed. */
static void wsync__mdir_remove_old(const char *parent, const char *base, const char *keep1, const char *keep2)
{
    char full[8192], linked[4096] = "";
    DIR *d;
    struct dirent *e;
    ssize_t rl;
    /* the version the link names now is never removed, whatever the caller
       thought it was (runs on one directory take turns; this holds without) */
    if (wsync__mdir_join(full, sizeof full, parent, base) && (rl = readlink(full, linked, sizeof linked - 1)) > 0)
        linked[rl] = 0;
    if (!(d = opendir(parent))) return;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        struct stat sb;
        if (!wsync__mdir_is_version(n, base) || strcmp(n, keep1) == 0 || (keep2 && strcmp(n, keep2) == 0) ||
            strcmp(n, linked) == 0 || !wsync__mdir_join(full, sizeof full, parent, n))
            continue;
        if (lstat(full, &sb) == 0 && S_ISDIR(sb.st_mode) && wsync__mdir_has_stepfile(full))
            wsync__mdir_remove_version(full);
    }
    closedir(d);
}

/* A version's name after "BASE.step_": its step and its ".K" (0 without). */
static void wsync__mdir_vnumber(const char *s, unsigned long long *step, unsigned long long *k)
{
    char *end;
    *step = strtoull(s, &end, 10);
    *k = *end == '.' ? strtoull(end + 1, NULL, 10) : 0;
}

/* When its step file was written: when the version was built. */
static int wsync__mdir_vtime(const char *dir, struct timespec *t)
{
    char full[8192];
    struct stat sb;
    if (!wsync__mdir_join(full, sizeof full, dir, WSYNC_DIR_STEP_FILE) || stat(full, &sb) != 0 ||
        !S_ISREG(sb.st_mode))
        return 0;
#if defined(__APPLE__)
    *t = sb.st_mtimespec;
#else
    *t = sb.st_mtim;
#endif
    return 1;
}

static int wsync__mdir_time_cmp(const struct timespec *a, const struct timespec *b)
{
    if (a->tv_sec != b->tv_sec) return a->tv_sec < b->tv_sec ? -1 : 1;
    return a->tv_nsec < b->tv_nsec ? -1 : a->tv_nsec > b->tv_nsec;
}

/* The versions beside `path` pruned to the one it links to and the
   previous one, as a switch leaves them, so that what a killed run left
   does not stay. A version is only linked right after it is built, so one
   built after the linked one was never linked (a run killed between its
   rename and the switch) and is removed; of the others the last built is
   the previous one (ties: a step not after the linked one's, then the
   higher step). Nothing is removed when `path` links to no version of
   ours beside it. */
static void wsync__mdir_prune(const char *path, const char *parent, const char *base)
{
    char full[8192], cur[256] = "", prev[256] = "";
    size_t blen = strlen(base);
    struct stat lsb, sb;
    struct timespec cur_t, prev_t, t;
    unsigned long long cur_step = 0, prev_step = 0, prev_k = 0, st, k;
    DIR *d;
    struct dirent *e;
    memset(&prev_t, 0, sizeof prev_t);
    if (stat(path, &lsb) != 0 || !S_ISDIR(lsb.st_mode) || !wsync__mdir_vtime(path, &cur_t) || !(d = opendir(parent)))
        return;
    while ((e = readdir(d)) != NULL) { /* the linked version's name */
        const char *n = e->d_name;
        if (!wsync__mdir_is_version(n, base) || strlen(n) >= sizeof cur || !wsync__mdir_join(full, sizeof full, parent, n))
            continue;
        if (lstat(full, &sb) == 0 && S_ISDIR(sb.st_mode) && sb.st_dev == lsb.st_dev && sb.st_ino == lsb.st_ino) {
            snprintf(cur, sizeof cur, "%s", n);
            wsync__mdir_vnumber(n + blen + 6, &cur_step, &k);
        }
    }
    if (!cur[0]) {
        closedir(d);
        return;
    }
    rewinddir(d);
    while ((e = readdir(d)) != NULL) { /* the previous one */
        const char *n = e->d_name;
        int better;
        if (!wsync__mdir_is_version(n, base) || strlen(n) >= sizeof prev || strcmp(n, cur) == 0 ||
            !wsync__mdir_join(full, sizeof full, parent, n))
            continue;
        if (lstat(full, &sb) != 0 || !S_ISDIR(sb.st_mode) || !wsync__mdir_vtime(full, &t) ||
            wsync__mdir_time_cmp(&t, &cur_t) > 0)
            continue;
        wsync__mdir_vnumber(n + blen + 6, &st, &k);
        if (!prev[0] || wsync__mdir_time_cmp(&t, &prev_t) != 0) better = !prev[0] || wsync__mdir_time_cmp(&t, &prev_t) > 0;
        else if ((st <= cur_step) != (prev_step <= cur_step)) better = st <= cur_step;
        else better = st != prev_step ? st > prev_step : k > prev_k;
        if (better) {
            snprintf(prev, sizeof prev, "%s", n);
            prev_t = t;
            prev_step = st;
            prev_k = k;
        }
    }
    closedir(d);
    wsync__mdir_remove_old(parent, base, cur, prev[0] ? prev : NULL);
}

/* What killed runs left beside `path` (BASE.step_*.tmp.PID and
   BASE.link.tmp.PID of processes that are gone) removed, the versions
   pruned. */
static void wsync__mdir_clean(const char *path)
{
    char parent[4096], full[8192];
    const char *base;
    size_t blen;
    DIR *d;
    struct dirent *e;
    wsync__mdir_split(path, parent, sizeof parent, &base);
    blen = strlen(base);
    if (!blen || !(d = opendir(parent))) return;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name, *rest;
        struct stat sb;
        if (strncmp(n, base, blen) != 0 || !wsync__mdir_join(full, sizeof full, parent, n)) continue;
        n += blen;
        if (strncmp(n, ".link.tmp.", 10) == 0 && wsync__mdir_dead_pid(n + 10)) {
            if (lstat(full, &sb) == 0 && S_ISLNK(sb.st_mode)) unlink(full);
        } else if (strncmp(n, ".step_", 6) == 0 && wsync__mdir_vsuffix(n + 6, &rest) &&
                   strncmp(rest, ".tmp.", 5) == 0 && wsync__mdir_dead_pid(rest + 5)) {
            if (lstat(full, &sb) == 0 && S_ISDIR(sb.st_mode)) wsync__mdir_remove_tree(full);
        }
    }
    closedir(d);
    wsync__mdir_prune(path, parent, base);
}

/* Writes `len` bytes to dir/name (a new file), fsynced. */
static wsync_result wsync__mdir_write_new(const char *dir, const char *name, const void *bytes, size_t len,
                                          wsync_error *err)
{
    char full[8192];
    int fd, ok;
    size_t off = 0;
    if (!wsync__mdir_join(full, sizeof full, dir, name))
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the path is too long", dir);
    if ((fd = open(full, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) < 0)
        return wsync__io_fail(err, "cannot create", full, 0);
    while (off < len) {
        ssize_t w = write(fd, (const uint8_t *)bytes + off, len - off > ((size_t)1 << 30) ? (size_t)1 << 30 : len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    ok = off == len && fsync(fd) == 0;
    if (!ok) {
        wsync__io_fail(err, "cannot write", full, 0);
        close(fd);
        return WSYNC_ERR_IO;
    }
    if (close(fd) != 0) return wsync__io_fail(err, "cannot close", full, 0);
    return WSYNC_OK;
}

static int wsync__mdir_file_sink(void *user, const void *bytes, size_t len)
{
    return fwrite(bytes, 1, len, (FILE *)user) == len ? 0 : -1;
}

/* One shard of the version: its tensors in the layout's order, and
   __metadata__ the trainer's keys in their order, "step" the pulled step:
   in its place where the trainer wrote one (the shard is then the
   trainer's byte for byte, when canonical), else last, because every
   pulled shard claims its step (a reader checks that the shards it loads
   are of one step; a relay publishes at it). A shard with none (a chain
   of single-file anchors) "format": "pt" and "step". */
static wsync_result wsync__mdir_write_shard(const char *dir, const wsync__mdir_shard *sh, const wsync__mdir_image *im,
                                            uint64_t step, wsync_error *err)
{
    wsync_st_tensor_desc *d;
    wsync_st_kv two[2], *meta = two;
    size_t n_meta = 2, j;
    char full[8192], stepbuf[32], m[sizeof err->message];
    FILE *f = NULL;
    int fd;
    wsync_result r = WSYNC_OK;
    if (!wsync__mdir_join(full, sizeof full, dir, sh->name))
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the path is too long", dir);
    if (!(d = (wsync_st_tensor_desc *)wsync__mdir_new(sh->n + 1, sizeof *d))) return wsync__mdir_oom(err, full);
    for (j = 0; j < sh->n; j++) {
        size_t i = sh->idx[j];
        d[j].name = im->t[i].name;
        d[j].name_len = im->st.tensors[i].name_len;
        d[j].dtype = im->t[i].dtype;
        d[j].rank = im->t[i].rank;
        d[j].shape = im->t[i].shape;
        d[j].data = im->t[i].data;
        d[j].nbytes = im->t[i].nbytes;
    }
    snprintf(stepbuf, sizeof stepbuf, "%llu", (unsigned long long)step);
    memset(two, 0, sizeof two);
    two[0].key = "format", two[0].value = "pt";
    two[1].key = "step", two[1].value = stepbuf;
    if (sh->has_meta && sh->n_meta) {
        int stepped = 0;
        if (!(meta = (wsync_st_kv *)wsync__mdir_new(sh->n_meta + 1, sizeof *meta))) {
            wsync__mdir_del(d);
            return wsync__mdir_oom(err, full);
        }
        memcpy(meta, sh->meta, sh->n_meta * sizeof *meta);
        for (j = 0, n_meta = sh->n_meta; j < n_meta; j++)
            if (meta[j].key_len == 4 && memcmp(meta[j].key, "step", 4) == 0)
                meta[j].value = stepbuf, meta[j].value_len = strlen(stepbuf), stepped = 1;
        if (!stepped) meta[n_meta++] = two[1];
    }
    if ((fd = open(full, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) < 0 || !(f = fdopen(fd, "wb"))) {
        r = wsync__io_fail(err, "cannot create", full, 0);
        if (fd >= 0) close(fd);
        goto done;
    }
    if ((r = wsync_st_write(d, sh->n, meta, n_meta, wsync__mdir_file_sink, f, NULL, err)) != WSYNC_OK) {
        memcpy(m, err->message, sizeof m);
        wsync__fail(err, r, UINT64_MAX, NULL, 0, "writing %s: %s", full, m);
    } else if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        r = wsync__io_fail(err, "cannot write", full, 0);
    }
    if (fclose(f) != 0 && r == WSYNC_OK) r = wsync__io_fail(err, "cannot close", full, 0);
done:
    if (meta != two) wsync__mdir_del(meta);
    wsync__mdir_del(d);
    return r;
}

/* Whether bytes are file f as HEAD names it: its size and wsync64 digest,
   and with a verify key its BLAKE2b-256 (a signed HEAD names every file's).
   0 with why. */
static int wsync__mdir_file_matches(const wsync_chain_options *co, const wsync_chain_file *f, const uint8_t *bytes,
                                    uint64_t size, const char **why)
{
    if (size != f->bytes) return *why = "its size is not HEAD's", 0;
    if (wsync_digest(bytes, (size_t)size) != f->digest)
        return *why = "its bytes do not match HEAD's digest (a damaged or replaced object)", 0;
    if (co->verify_key) {
        uint8_t h[WSYNC_CHAIN_HASH_SIZE];
        if (!f->has_hash) return *why = "the signed HEAD names no BLAKE2b-256 for it", 0;
        wsync_blake2b(bytes, (size_t)size, h, sizeof h);
        if (memcmp(h, f->hash, sizeof h) != 0)
            return *why = "its BLAKE2b-256 is not the one the signed HEAD names (a replaced object)", 0;
    }
    return 1;
}

/* A plain file of anchor e: a hard link to the previous version's file
   when that one has the same size and digest (and hash), else fetched from
   the store and checked the same way. */
static wsync_result wsync__mdir_put_file(const wsync_store *s, const wsync_chain_options *co,
                                         const wsync_chain_entry *e, const wsync_chain_file *f, const char *prev,
                                         const char *dir, wsync_error *err)
{
    char key[1400], old[8192], full[8192], m[sizeof err->message];
    uint8_t *bytes = NULL;
    uint64_t size = 0;
    const char *why;
    wsync_result r;
    if (!wsync__mdir_join(full, sizeof full, dir, f->name))
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the path is too long", dir);
    if (prev && wsync__mdir_join(old, sizeof old, prev, f->name)) {
        wsync_mapped map;
        struct stat sb;
        if (lstat(old, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == f->bytes &&
            wsync_file_map(old, &map, NULL) == WSYNC_OK) {
            int same = wsync__mdir_file_matches(co, f, map.bytes, map.size, &why);
            wsync_file_unmap(&map);
            if (same && link(old, full) == 0) return WSYNC_OK;
        }
    }
    if (!wsync__mdir_key(key, sizeof key, co, e, f->name))
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the key is too long", f->name);
    if ((r = wsync_store_get_capped(s, key, f->bytes, WSYNC_STORE_GET_EXACT, NULL, &bytes, &size, err)) != WSYNC_OK) {
        memcpy(m, err->message, sizeof m);
        return wsync__fail(err, r, UINT64_MAX, NULL, 0, "fetching %s: %s", key, m);
    }
    if (!wsync__mdir_file_matches(co, f, bytes, size, &why)) {
        wsync__free(NULL, bytes);
        return wsync__fail(err, size != f->bytes ? WSYNC_ERR_SIZE_MISMATCH : WSYNC_ERR_DIGEST_MISMATCH, UINT64_MAX,
                           NULL, 0, "%s: %s", key, why);
    }
    r = wsync__mdir_write_new(dir, f->name, bytes, (size_t)size, err);
    wsync__free(NULL, bytes);
    return r;
}

/* The plain files of the version `prev` links to (every regular file but
   the shards and the step file) into dir, hard links (copies where a link
   cannot be made): a step with no anchor at or before it in HEAD
   (retention dropped it) keeps the files of the step it came from. */
static wsync_result wsync__mdir_carry_prev(const char *prev, const char *dir, wsync_error *err)
{
    wsync__mdir_names entries;
    char old[8192], full[8192];
    size_t i;
    wsync_result r = WSYNC_OK;
    if (!wsync__mdir_list(prev, &entries))
        return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "%s: cannot list the previous version: %s", prev,
                           strerror(errno));
    for (i = 0; r == WSYNC_OK && i < entries.n; i++) {
        const char *nm = entries.v[i];
        struct stat sb;
        wsync_mapped map;
        if (wsync__mdir_ends(nm, ".safetensors") || strcmp(nm, WSYNC_DIR_STEP_FILE) == 0) continue;
        if (!wsync__mdir_join(old, sizeof old, prev, nm) || !wsync__mdir_join(full, sizeof full, dir, nm) ||
            lstat(old, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (link(old, full) == 0) continue;
        if ((r = wsync_file_map(old, &map, err)) != WSYNC_OK) break;
        r = wsync__mdir_write_new(dir, nm, map.bytes, (size_t)map.size, err);
        wsync_file_unmap(&map);
    }
    wsync__mdir_names_free(&entries);
    return r;
}

/* Writes the image as the version `step` beside `path` (BASE.step_NNNNNN,
   its shards laid out as the newest anchor at or before the step, that
   anchor's files, the step file), switches the link `path` to it in one
   rename, and removes versions older than the previous one. WSYNC_OK
   switched (or another run had switched it to this very step: *wrote 0);
   else `path` as it was. */
static wsync_result wsync__mdir_save(const wsync_store *s, const wsync_chain_options *co, const wsync__mdir_image *im,
                                     wsync__mdir_layout *lay, const char *path, uint64_t step, int *wrote,
                                     wsync_error *err)
{
    wsync_chain_info info;
    const wsync_chain_entry *an = NULL;
    char parent[4096], prevname[4096], finalname[4096], final[4096], tmp[4096], linktmp[4096], text[192];
    const char *base;
    struct stat sb;
    uint64_t state = 0;
    int known = 0, have_prev = 0, built = 0, n;
    unsigned u;
    size_t i;
    ssize_t rl;
    wsync_result r;
    *wrote = 0;
    if ((r = wsync_chain_read(s, co, &info, err)) != WSYNC_OK) return r;
    for (i = 0; i < info.n_entries; i++) {
        const wsync_chain_entry *e = &info.entries[i];
        if (e->kind == WSYNC_CHAIN_ANCHOR && e->step <= step) an = e;
        if (e->step == step && e->has_digests) state = e->state, known = 1;
    }
    if (!known && (r = wsync_state_digest(im->t, im->st.n_tensors, co->threads, &state, err)) != WSYNC_OK) {
        wsync_chain_info_free(&info);
        return r;
    }
    /* the shards as the anchor lays them out (its headers read again when
       the anchor is not the one the layout came from) */
    if (an && an->n_files && (!lay->from_anchor || lay->anchor_step != an->step)) {
        wsync__mdir_layout fresh;
        if ((r = wsync__mdir_layout_from_entry(s, co, an, im, &fresh, err)) != WSYNC_OK) {
            wsync_chain_info_free(&info);
            return r;
        }
        memcpy(fresh.linked, lay->linked, sizeof fresh.linked);
        wsync__mdir_layout_free(lay);
        *lay = fresh;
    } else if (!lay->n_shards) { /* a chain of single-file anchors: one shard */
        char one[1][WSYNC_CHAIN_FILE_NAME_MAX];
        size_t count = im->st.n_tensors;
        snprintf(one[0], sizeof one[0], "model.safetensors");
        if (!wsync__mdir_layout_runs(lay, 1, one, &count, NULL)) {
            wsync_chain_info_free(&info);
            return wsync__mdir_oom(err, "layout");
        }
    }
    wsync__mdir_split(path, parent, sizeof parent, &base);
    { /* another run switched the link, since this one read it, to this
         very step (runs take turns): nothing to write */
        wsync__mdir_stepfile sf;
        char now[512];
        ssize_t k = readlink(path, now, sizeof now - 1);
        now[k > 0 ? k : 0] = 0;
        if (k > 0 && strcmp(now, lay->linked) != 0 && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) &&
            wsync__mdir_has_stepfile(path) && wsync__mdir_read_stepfile(path, &sf, NULL) == WSYNC_OK &&
            sf.step == step && sf.state == state && sf.has_chain == im->has_chain &&
            (!im->has_chain || memcmp(sf.chain, im->chain, sizeof sf.chain) == 0)) {
            memcpy(lay->linked, now, sizeof now);
            wsync_chain_info_free(&info);
            return WSYNC_OK;
        }
    }
    prevname[0] = 0;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) && (rl = readlink(path, prevname, sizeof prevname - 1)) > 0) {
        prevname[rl] = 0;
        have_prev = 1;
        if (strchr(prevname, '/')) prevname[0] = 0; /* not a name beside it: not one of ours to keep by name */
    }
    /* the version's name: BASE.step_NNNNNN, or BASE.step_NNNNNN.K when that
       is taken (the same step rebuilt, or an older version a reader may
       still be reading): nothing is removed before the switch */
    for (u = 0;; u++) {
        if (u == 0) n = snprintf(finalname, sizeof finalname, "%s.step_%06llu", base, (unsigned long long)step);
        else n = snprintf(finalname, sizeof finalname, "%s.step_%06llu.%u", base, (unsigned long long)step, u);
        if (n <= 0 || (size_t)n >= sizeof finalname || !wsync__mdir_join(final, sizeof final, parent, finalname)) {
            wsync_chain_info_free(&info);
            return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the name is too long", path);
        }
        if (strcmp(finalname, prevname) != 0 && lstat(final, &sb) != 0 && errno == ENOENT) break;
        if (u >= 1000) {
            wsync_chain_info_free(&info);
            return wsync__fail(err, WSYNC_ERR_IO, UINT64_MAX, NULL, 0, "%s: and 1000 names after it are taken", final);
        }
    }
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", final, (long)getpid()) >= (int)sizeof tmp ||
        snprintf(linktmp, sizeof linktmp, "%s/%s.link.tmp.%ld", parent, base, (long)getpid()) >= (int)sizeof linktmp) {
        wsync_chain_info_free(&info);
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the name is too long", path);
    }
    if (lstat(tmp, &sb) == 0) wsync__mdir_remove_tree(tmp); /* a run of ours, or of a dead process with our pid */
    if (mkdir(tmp, 0755) != 0) {
        r = wsync__io_fail(err, "cannot create", tmp, 0);
        goto done;
    }
    built = 1;
    for (i = 0; i < lay->n_shards; i++)
        if ((r = wsync__mdir_write_shard(tmp, &lay->shards[i], im, step, err)) != WSYNC_OK) goto done;
    for (i = 0; an && i < an->n_files; i++) /* a step file an older publish carried: not the anchor's to give */
        if (!an->files[i].tensors && strcmp(an->files[i].name, WSYNC_DIR_STEP_FILE) != 0 &&
            (r = wsync__mdir_put_file(s, co, an, &an->files[i], have_prev ? path : NULL, tmp, err)) != WSYNC_OK)
            goto done;
    if (!an) { /* no anchor at or before the step in HEAD now (retention dropped it, or a publisher raced) */
        struct stat psb;
        if (have_prev && stat(path, &psb) == 0 && S_ISDIR(psb.st_mode)) {
            if ((r = wsync__mdir_carry_prev(path, tmp, err)) != WSYNC_OK) goto done;
        } else if (lay->from_anchor) { /* a directory's: its files are nowhere to take from */
            r = wsync__fail(err, WSYNC_ERR_NOT_FOUND, UINT64_MAX, NULL, 0, "%s: HEAD names no anchor at or before "
                            "step %llu any more (the anchor %llu the sync started from is gone: retention, or a "
                            "publisher meanwhile) and there is no previous version to take the directory's files "
                            "from; left as it was, try again", path, (unsigned long long)step,
                            (unsigned long long)lay->anchor_step);
            goto done;
        }
    }
    n = snprintf(text, sizeof text, "{\"step\":%llu,\"state\":\"%016llx\"", (unsigned long long)step,
                 (unsigned long long)state);
    if (im->has_chain) { /* the signed chain the step came from (a sync given a verify key) */
        n += snprintf(text + n, sizeof text - (size_t)n, ",\"chain\":\"");
        for (i = 0; i < WSYNC_CHAIN_ID_SIZE; i++) n += snprintf(text + n, sizeof text - (size_t)n, "%02x", im->chain[i]);
        n += snprintf(text + n, sizeof text - (size_t)n, "\"");
    }
    n += snprintf(text + n, sizeof text - (size_t)n, "}\n");
    if ((r = wsync__mdir_write_new(tmp, WSYNC_DIR_STEP_FILE, text, (size_t)n, err)) != WSYNC_OK) goto done;
    if (!wsync__mdir_fsync_dir(tmp)) {
        r = wsync__io_fail(err, "cannot fsync", tmp, 0);
        goto done;
    }
    if (rename(tmp, final) != 0) {
        r = wsync__io_fail(err, "cannot rename to its version's name", tmp, 0);
        goto done;
    }
    built = 2;
    wsync__mdir_fsync_dir(parent);
    /* the switch: a new link renamed over the old one */
    unlink(linktmp);
    if (symlink(finalname, linktmp) != 0) {
        r = wsync__io_fail(err, "cannot create the link", linktmp, 0);
        goto done;
    }
    if (rename(linktmp, path) != 0) {
        r = wsync__io_fail(err, "cannot rename the new link over", path, 0);
        unlink(linktmp);
        goto done;
    }
    wsync__mdir_fsync_dir(parent);
    r = WSYNC_OK;
    *wrote = 1;
    if (strlen(finalname) < sizeof lay->linked) memcpy(lay->linked, finalname, strlen(finalname) + 1);
    else lay->linked[0] = 0;
    wsync__mdir_remove_old(parent, base, finalname, prevname[0] ? prevname : NULL);
done:
    if (r != WSYNC_OK && built == 1) wsync__mdir_remove_tree(tmp);
    if (r != WSYNC_OK && built == 2) wsync__mdir_remove_version(final);
    wsync_chain_info_free(&info);
    return r;
}

/* Runs on one directory take turns: an exclusive flock on .BASE.wsync-lock
   beside the link, waiting for the run before. The fd, or -1 with err. */
static int wsync__mdir_lock(const char *path, wsync_error *err)
{
    char parent[4096], lock[8192];
    const char *base;
    int fd;
    wsync__mdir_split(path, parent, sizeof parent, &base);
    if (snprintf(lock, sizeof lock, "%s/.%s.wsync-lock", parent, base) >= (int)sizeof lock)
        return wsync__fail(err, WSYNC_ERR_LIMIT, UINT64_MAX, NULL, 0, "%s: the lock's name is too long", path), -1;
    if ((fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644)) < 0)
        return wsync__io_fail(err, "cannot open the lock", lock, 0), -1;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue; /* a follower's stop signal: it stops after this run */
        wsync__io_fail(err, "cannot lock", lock, 0);
        close(fd);
        return -1;
    }
    return fd;
}

/* What a pull may do with `path`, without reading the chain: 1 a link
   wsync made (or a dangling link to a version beside it), 0 nothing there
   (a new directory, or a file), -1 refused (err says why), 2 a file. */
static int wsync__mdir_local(const char *path, wsync_error *err)
{
    struct stat lsb, sb;
    if (lstat(path, &lsb) != 0) {
        if (errno != ENOENT) return wsync__io_fail(err, "cannot look at", path, 0), -1;
        return 0;
    }
    if (S_ISLNK(lsb.st_mode) && stat(path, &sb) != 0) { /* dangling: a version of ours gone, or not ours */
        char target[4096], parent[4096];
        const char *base;
        ssize_t n = readlink(path, target, sizeof target - 1);
        wsync__mdir_split(path, parent, sizeof parent, &base);
        if (n > 0) target[n] = 0;
        if (n > 0 && wsync__mdir_is_version(target, base)) return 1; /* rebuilt from the chain's anchor */
        wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s: a symbolic link to '%s', which does not "
                    "exist and is not a version wsync made beside it; it is left alone (remove it, or give another "
                    "path)", path, n > 0 ? target : "?");
        return -1;
    }
    if (S_ISLNK(lsb.st_mode) && S_ISDIR(sb.st_mode)) {
        if (wsync__mdir_has_stepfile(path)) return 1;
        wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s: a link to a directory wsync did not make (it "
                    "holds no %s); give a path that does not exist yet (wsync makes it a link to a version beside "
                    "it)", path, WSYNC_DIR_STEP_FILE);
        return -1;
    }
    if (S_ISDIR(lsb.st_mode)) {
        /* the path once: the message must fit wsync_error.message whole */
        wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s: a directory; wsync keeps a model as a "
                    "link it switches between versions beside it (NAME.step_N) and never writes into yours: give "
                    "a path that does not exist yet", path);
        return -1;
    }
    return 2;
}

WSYNC_DEF wsync_result wsync_dir_target(const char *path, const wsync_store *store, const wsync_chain_options *opt,
                                        uint64_t limit, int *is_dir, wsync_error *err)
{
    wsync_chain_info info;
    wsync_chain_options co;
    wsync_result r;
    size_t i;
    int k, dir = 0;
    wsync__error_reset(err);
    if (!path || !store || !is_dir)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_dir_target needs a path, a store and an output");
    *is_dir = 0;
    if ((k = wsync__mdir_local(path, err)) < 0) return *is_dir = -1, err ? err->code : WSYNC_ERR_UNSUPPORTED;
    if (k == 1) return *is_dir = 1, WSYNC_OK;
    if (k == 2 || wsync__mdir_ends(path, ".safetensors")) return WSYNC_OK;
    if (opt) co = *opt;
    else memset(&co, 0, sizeof co);
    if ((r = wsync_chain_read(store, &co, &info, err)) != WSYNC_OK) return r;
    if (limit == WSYNC_STEP_LATEST) limit = info.head_step;
    for (i = 0; i < info.n_entries; i++) /* ascending by step: the last match is the newest */
        if (info.entries[i].kind == WSYNC_CHAIN_ANCHOR && info.entries[i].step <= limit)
            dir = info.entries[i].n_files > 0;
    wsync_chain_info_free(&info);
    *is_dir = dir;
    return WSYNC_OK;
}

/* ---- the follower: one sync at a time, under the lock ---- */

struct wsync_dir_follower {
    const wsync_store *store;
    wsync_chain_options co;    /* the caller's, WSYNC_CHAIN_VERIFY_STATE added */
    char *path;                /* without trailing slashes */
    wsync__mdir_image im;      /* the model held: the version linked, or an anchor's layout */
    wsync__mdir_layout lay;
    int loaded;                /* im holds a model (from the link, or built from an anchor) */
    wsync_subscriber *sub;
    int owned;                 /* a sync reached a step of this chain here */
    int new_chain;             /* WSYNC_CHAIN_NEW_CHAIN: the chain the version records is not pinned */
    int has_chain;             /* with a verify key: the chain followed */
    uint8_t chain[WSYNC_CHAIN_ID_SIZE];
};

/* The chain the subscriber has seen pass (kept across subscribers); the
   chain pinned in a new one. */
static void wsync__mdir_learn(wsync_dir_follower *f)
{
    uint8_t id[WSYNC_CHAIN_ID_SIZE];
    if (f->sub && f->co.verify_key && wsync_subscriber_chain_id(f->sub, id)) {
        memcpy(f->chain, id, sizeof id);
        f->has_chain = 1;
    }
}

/* A new subscriber over the model held (its step set when it has one). */
static wsync_result wsync__mdir_subscribe(wsync_dir_follower *f, int with_step, wsync_error *err)
{
    wsync_subscriber *sub = NULL;
    wsync_result r;
    wsync__mdir_learn(f);
    if ((r = wsync_subscriber_open(f->store, f->im.t, f->im.st.n_tensors, &f->co, &sub, err)) != WSYNC_OK) return r;
    wsync_subscriber_close(f->sub);
    f->sub = sub;
    if (with_step && f->im.has_step) wsync_subscriber_set_step(sub, f->im.step);
    if (f->co.verify_key && f->has_chain) wsync_subscriber_set_chain_id(sub, f->chain);
    return WSYNC_OK;
}

/* The model of the version `path` links to, or (none) nothing yet. */
static wsync_result wsync__mdir_load(wsync_dir_follower *f, wsync_error *err)
{
    struct stat sb;
    wsync_result r;
    if (stat(f->path, &sb) != 0) return WSYNC_OK; /* nothing, or a dangling link: built from the anchor */
    if ((r = wsync__mdir_image_from_link(f->path, &f->im, &f->lay, err)) != WSYNC_OK) return r;
    if (f->im.has_chain && !f->new_chain && !f->has_chain) {
        memcpy(f->chain, f->im.chain, sizeof f->chain);
        f->has_chain = 1;
    }
    f->loaded = 1;
    if ((r = wsync__mdir_subscribe(f, 1, err)) != WSYNC_OK) {
        f->loaded = 0;
        wsync__mdir_image_free(&f->im);
        wsync__mdir_layout_free(&f->lay);
    }
    return r;
}

WSYNC_DEF void wsync_dir_follower_close(wsync_dir_follower *f)
{
    if (!f) return;
    wsync_subscriber_close(f->sub);
    wsync__mdir_image_free(&f->im);
    wsync__mdir_layout_free(&f->lay);
    wsync__mdir_del(f->path);
    wsync__mdir_del(f);
}

WSYNC_DEF wsync_result wsync_dir_follower_open(const wsync_store *store, const wsync_chain_options *opt,
                                               const char *path, wsync_dir_follower **out, wsync_error *err)
{
    wsync_dir_follower *f;
    size_t n;
    int k, fd;
    wsync_result r;
    wsync__error_reset(err);
    if (!out) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_dir_follower_open needs an output");
    *out = NULL;
    if (!store || !path || !*path)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_dir_follower_open needs a store and a path");
    if (!(f = (wsync_dir_follower *)wsync__mdir_new(1, sizeof *f))) return wsync__mdir_oom(err, "follower");
    n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "out/model/" is the link "out/model" */
    if (!(f->path = wsync__mdir_dup(path, n))) {
        wsync__mdir_del(f);
        return wsync__mdir_oom(err, "follower");
    }
    f->store = store;
    if (opt) f->co = *opt;
    f->new_chain = (f->co.flags & WSYNC_CHAIN_NEW_CHAIN) != 0;
    f->co.flags = (f->co.flags & ~WSYNC_CHAIN_NEW_CHAIN) | WSYNC_CHAIN_VERIFY_STATE;
    if ((k = wsync__mdir_local(f->path, err)) < 0 || k == 2 || (k == 0 && wsync__mdir_ends(f->path, ".safetensors"))) {
        if (k >= 0)
            wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, k == 2 ? "%s: a file, not a model directory "
                        "(a pull of a single safetensors file keeps it)" : "%s: a name ending in .safetensors is a "
                        "file's, not a model directory's", f->path);
        wsync_dir_follower_close(f);
        return WSYNC_ERR_UNSUPPORTED;
    }
    if ((fd = wsync__mdir_lock(f->path, err)) < 0) {
        wsync_dir_follower_close(f);
        return err ? err->code : WSYNC_ERR_IO;
    }
    wsync__mdir_clean(f->path);
    r = wsync__mdir_load(f, err);
    close(fd);
    if (r != WSYNC_OK) {
        wsync_dir_follower_close(f);
        return r;
    }
    *out = f;
    return WSYNC_OK;
}

WSYNC_DEF int wsync_dir_follower_step(const wsync_dir_follower *f, uint64_t *step)
{
    if (!f || !f->loaded || !f->im.has_step) return 0;
    if (step) *step = f->im.step;
    return 1;
}

/* Whether the model held, whose tensors are not the chain's now, was this
   chain's: a sync reached a step here, or the step it claims is in the
   chain with the state digest of its bytes, or the chain's anchor at or
   before that step has its tensors. A version of another model shows none
   of these. */
static int wsync__mdir_from_chain(wsync_dir_follower *f)
{
    wsync_chain_info info;
    uint64_t want = 0, have = 0;
    int known = 0, anchor = 0, same = 0;
    size_t i, j;
    if (f->owned) return 1;
    if (!f->im.has_step || wsync_chain_read(f->store, &f->co, &info, NULL) != WSYNC_OK) return 0;
    for (i = 0; i < info.n_entries; i++) {
        const wsync_chain_entry *e = &info.entries[i];
        if (e->step == f->im.step && e->has_digests) want = e->state, known = 1;
        if (e->kind == WSYNC_CHAIN_ANCHOR && e->step <= f->im.step) anchor = 1;
    }
    wsync_chain_info_free(&info);
    if (known && wsync_state_digest(f->im.t, f->im.st.n_tensors, f->co.threads, &have, NULL) == WSYNC_OK &&
        have == want)
        return 1;
    if (anchor) {
        wsync__mdir_image old;
        if (wsync__mdir_image_from_anchor(f->store, &f->co, f->im.step, &old, NULL, NULL, NULL) == WSYNC_OK) {
            same = old.st.n_tensors == f->im.st.n_tensors;
            for (j = 0; same && j < old.st.n_tensors; j++) {
                const wsync_st_tensor *x = &old.st.tensors[j], *y = wsync_st_find_n(&f->im.st, x->name, x->name_len);
                same = y && y->dtype == x->dtype && y->rank == x->rank &&
                       (!x->rank || memcmp(x->shape, y->shape, x->rank * sizeof *x->shape) == 0);
            }
            wsync__mdir_image_free(&old);
        }
    }
    return same;
}

/* The chain's tensors are not the model's: rebuilt from the anchor at or
   before `step` when the model was this chain's (a new subscriber, no step
   held); else WSYNC_ERR_LAYOUT stands. */
static wsync_result wsync__mdir_relayout(wsync_dir_follower *f, uint64_t step, wsync_dir_sync_stats *st,
                                         wsync_error *err)
{
    wsync__mdir_image im;
    wsync__mdir_layout lay;
    wsync__mdir_image old_im;
    wsync__mdir_layout old_lay;
    uint64_t anchor = 0;
    wsync_result r;
    char m[sizeof err->message];
    if (!wsync__mdir_from_chain(f)) return WSYNC_ERR_LAYOUT;
    if ((r = wsync__mdir_image_from_anchor(f->store, &f->co, step, &im, &lay, &anchor, err)) != WSYNC_OK) {
        memcpy(m, err->message, sizeof m);
        return wsync__fail(err, r, UINT64_MAX, NULL, 0, "the chain's tensors changed, and its anchor could not be "
                           "read: %s", m);
    }
    old_im = f->im;
    old_lay = f->lay;
    f->im = im;
    f->lay = lay;
    memcpy(f->lay.linked, old_lay.linked, sizeof f->lay.linked);
    if ((r = wsync__mdir_subscribe(f, 0, err)) != WSYNC_OK) {
        f->im = old_im;
        f->lay = old_lay;
        wsync__mdir_image_free(&im);
        wsync__mdir_layout_free(&lay);
        return r;
    }
    wsync__mdir_image_free(&old_im);
    wsync__mdir_layout_free(&old_lay);
    f->owned = 1;
    st->relayout = 1;
    st->relayout_step = anchor;
    return WSYNC_OK;
}

/* Whether the model held is `step` as HEAD records it: 1 yes, 0 HEAD does
   not say (no HEAD, or no state digest for it), -1 no. checked: the sync
   already compared the state digests. */
static int wsync__mdir_state(wsync_dir_follower *f, uint64_t step, int checked)
{
    wsync_chain_info info;
    uint64_t want = 0, have = 0;
    int known = 0;
    size_t i;
    if (wsync_chain_read(f->store, &f->co, &info, NULL) != WSYNC_OK) return 0;
    for (i = 0; info.has_head && i < info.n_entries; i++)
        if (info.entries[i].step == step && info.entries[i].has_digests) want = info.entries[i].state, known = 1;
    wsync_chain_info_free(&info);
    if (!known) return 0;
    if (checked) return 1;
    if (wsync_state_digest(f->im.t, f->im.st.n_tensors, f->co.threads, &have, NULL) != WSYNC_OK) return 0;
    return have == want ? 1 : -1;
}

static void wsync__mdir_add(wsync_sync_stats *to, const wsync_sync_stats *first)
{
    to->bytes_fetched += first->bytes_fetched;
    to->rejected += first->rejected;
    to->anchors += first->anchors;
    to->deltas += first->deltas;
}

/* One sync under the lock (wsync_dir_follower_sync). */
static wsync_result wsync__mdir_sync(wsync_dir_follower *f, uint64_t step, wsync_dir_sync_stats *st, wsync_error *err)
{
    wsync_result r, w;
    uint64_t now;
    unsigned applied;
    int wrote = 0, state;
    struct timespec t0, t1;
    if (!f->loaded) {
        /* nothing linked (yet): the layout of the anchor the sync starts from */
        wsync__mdir_image_free(&f->im);
        wsync__mdir_layout_free(&f->lay);
        if ((r = wsync__mdir_image_from_anchor(f->store, &f->co, step, &f->im, &f->lay, NULL, err)) != WSYNC_OK)
            return r;
        f->loaded = 1;
        if ((r = wsync__mdir_subscribe(f, 0, err)) != WSYNC_OK) {
            f->loaded = 0;
            return r;
        }
    }
    st->had_step = f->im.has_step;
    st->from_step = f->im.step;
    r = wsync_subscriber_sync(f->sub, step, &st->sync, err);
    if (r != WSYNC_OK && f->im.has_step && !wsync_subscriber_step(f->sub, &now)) {
        /* HEAD's state digest disagreed with the result: the version did not
           hold the step it claims (deltas without base digests cannot
           tell); the subscriber knows no step now: once more, from an anchor */
        wsync_sync_stats first = st->sync;
        r = wsync_subscriber_sync(f->sub, step, &st->sync, err);
        wsync__mdir_add(&st->sync, &first);
    }
    if (r == WSYNC_ERR_LAYOUT) {
        wsync_sync_stats first = st->sync;
        wsync_error keep;
        memset(&keep, 0, sizeof keep);
        if (err) keep = *err;
        if ((w = wsync__mdir_relayout(f, step, st, err)) == WSYNC_OK) {
            r = wsync_subscriber_sync(f->sub, step, &st->sync, err);
            wsync__mdir_add(&st->sync, &first);
        } else if (w == WSYNC_ERR_LAYOUT) {
            if (err) *err = keep; /* another model's version: left alone */
        } else {
            r = w;
        }
    }
    applied = st->sync.anchors + st->sync.deltas;
    if (wsync_subscriber_step(f->sub, &now) && (applied || !f->im.has_step || now != f->im.step)) {
        state = wsync__mdir_state(f, now, r == WSYNC_OK);
        if (state < 0) { /* the model reached does not check: no step held, next time from an anchor */
            wsync_error keep;
            memset(&keep, 0, sizeof keep);
            if (err) keep = *err;
            f->im.has_step = 0;
            if ((w = wsync__mdir_subscribe(f, 0, err)) != WSYNC_OK) return w;
            if (err) *err = keep; /* the sync's failure */
            return r;
        }
        if (state == 0 && r != WSYNC_OK) return r; /* the last step reached cannot be checked: not written */
        st->unchecked = state == 0;
        wsync__mdir_learn(f); /* the chain the step came from, recorded with it (a verify key's only) */
        f->im.has_chain = f->co.verify_key && f->has_chain;
        if (f->im.has_chain) memcpy(f->im.chain, f->chain, sizeof f->chain);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if ((w = wsync__mdir_save(f->store, &f->co, &f->im, &f->lay, f->path, now, &wrote, err)) != WSYNC_OK) {
            st->write_failed = 1;
            return w;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        st->write_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        st->switched = 1;
        f->im.has_step = 1;
        f->im.step = now;
    }
    if (r == WSYNC_OK) f->owned = 1;
    return r;
}

WSYNC_DEF wsync_result wsync_dir_follower_sync(wsync_dir_follower *f, uint64_t step, wsync_dir_sync_stats *stats,
                                               wsync_error *err)
{
    wsync_dir_sync_stats local;
    wsync_result r;
    int fd;
    ssize_t n;
    wsync__error_reset(err);
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!f) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "wsync_dir_follower_sync needs a follower");
    if ((fd = wsync__mdir_lock(f->path, err)) < 0) return err ? err->code : WSYNC_ERR_IO;
    r = wsync__mdir_sync(f, step, stats, err);
    close(fd);
    stats->has_step = wsync_dir_follower_step(f, &stats->step);
    n = readlink(f->path, stats->version, sizeof stats->version - 1);
    stats->version[n > 0 ? n : 0] = 0;
    return r;
}

WSYNC_DEF wsync_result wsync_dir_anchor_image(const wsync_store *store, const wsync_chain_options *opt,
                                              const wsync_chain_entry *anchor, uint8_t **image, uint64_t *size,
                                              wsync_error *err)
{
    wsync__mdir_image im;
    wsync_chain_options co;
    wsync_result r;
    wsync__error_reset(err);
    if (!store || !anchor || anchor->kind != WSYNC_CHAIN_ANCHOR || !image || !size)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s",
                           "wsync_dir_anchor_image needs a store, an anchor's entry and outputs");
    *image = NULL;
    *size = 0;
    if (opt) co = *opt;
    else memset(&co, 0, sizeof co);
    if ((r = wsync__mdir_image_from_entry(store, &co, anchor, &im, NULL, err)) != WSYNC_OK) return r;
    *image = im.buf;
    *size = im.size;
    im.buf = NULL;
    wsync__mdir_image_free(&im);
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_dir_pull(const wsync_store *store, const wsync_chain_options *opt, const char *path,
                                      uint64_t step, wsync_dir_sync_stats *stats, wsync_error *err)
{
    wsync_dir_follower *f = NULL;
    wsync_result r;
    if (stats) memset(stats, 0, sizeof *stats);
    if ((r = wsync_dir_follower_open(store, opt, path, &f, err)) != WSYNC_OK) return r;
    r = wsync_dir_follower_sync(f, step, stats, err);
    wsync_dir_follower_close(f);
    return r;
}

#else /* !WSYNC__MDIR */

static wsync_result wsync__mdir_none(wsync_error *err)
{
    return wsync__fail(err, WSYNC_ERR_UNSUPPORTED, UINT64_MAX, NULL, 0, "%s", "model directories need POSIX.1-2008: "
                       "define _POSIX_C_SOURCE 200809L (or _GNU_SOURCE) before including wsync.h");
}

#ifndef WSYNC_NO_ENCODE
WSYNC_DEF wsync_result wsync_dir_read(const char *dir, const char *const *include, size_t n_include,
                                      wsync_dir_checkpoint *out, wsync_error *err)
{
    (void)dir, (void)include, (void)n_include;
    if (out) memset(out, 0, sizeof *out);
    return wsync__mdir_none(err);
}
WSYNC_DEF void wsync_dir_checkpoint_free(wsync_dir_checkpoint *c)
{
    (void)c;
}
WSYNC_DEF wsync_result wsync_dir_publish(wsync_publisher *pub, uint64_t step, const wsync_dir_checkpoint *c,
                                         wsync_publish_stats *stats, wsync_error *err)
{
    (void)pub, (void)step, (void)c, (void)stats;
    return wsync__mdir_none(err);
}
#endif
WSYNC_DEF wsync_result wsync_dir_follower_open(const wsync_store *store, const wsync_chain_options *opt,
                                               const char *path, wsync_dir_follower **out, wsync_error *err)
{
    (void)store, (void)opt, (void)path;
    if (out) *out = NULL;
    return wsync__mdir_none(err);
}
WSYNC_DEF wsync_result wsync_dir_follower_sync(wsync_dir_follower *f, uint64_t step, wsync_dir_sync_stats *stats,
                                               wsync_error *err)
{
    (void)f, (void)step;
    if (stats) memset(stats, 0, sizeof *stats);
    return wsync__mdir_none(err);
}
WSYNC_DEF int wsync_dir_follower_step(const wsync_dir_follower *f, uint64_t *step)
{
    (void)f, (void)step;
    return 0;
}
WSYNC_DEF void wsync_dir_follower_close(wsync_dir_follower *f)
{
    (void)f;
}
WSYNC_DEF wsync_result wsync_dir_pull(const wsync_store *store, const wsync_chain_options *opt, const char *path,
                                      uint64_t step, wsync_dir_sync_stats *stats, wsync_error *err)
{
    (void)store, (void)opt, (void)path, (void)step;
    if (stats) memset(stats, 0, sizeof *stats);
    return wsync__mdir_none(err);
}
WSYNC_DEF wsync_result wsync_dir_anchor_image(const wsync_store *store, const wsync_chain_options *opt,
                                              const wsync_chain_entry *anchor, uint8_t **image, uint64_t *size,
                                              wsync_error *err)
{
    (void)store, (void)opt, (void)anchor;
    if (image) *image = NULL;
    if (size) *size = 0;
    return wsync__mdir_none(err);
}
WSYNC_DEF wsync_result wsync_dir_target(const char *path, const wsync_store *store, const wsync_chain_options *opt,
                                        uint64_t limit, int *is_dir, wsync_error *err)
{
    (void)path, (void)store, (void)opt, (void)limit;
    if (is_dir) *is_dir = 0;
    return wsync__mdir_none(err);
}
#endif /* WSYNC__MDIR */

/* ---------------------------------------------------------------------
   Fabric: descriptors  >>fabric
   --------------------------------------------------------------------- */

WSYNC_DEF void wsync_fabric_desc_encode(const wsync_fabric_desc *d, uint8_t out[WSYNC_FABRIC_DESC_WIRE])
{
    uint32_t n = d->n_bytes > WSYNC_FABRIC_DESC_MAX ? WSYNC_FABRIC_DESC_MAX : d->n_bytes;
    memset(out, 0, WSYNC_FABRIC_DESC_WIRE);
    wsync__put_le32(out, d->backend);
    wsync__put_le32(out + 4, d->kind);
    wsync__put_le32(out + 8, d->version);
    wsync__put_le32(out + 12, d->flags);
    wsync__store_le64(out + 16, d->addr);
    wsync__store_le64(out + 24, d->len);
    wsync__put_le32(out + 32, n);
    memcpy(out + 36, d->bytes, n);
}

WSYNC_DEF wsync_result wsync_fabric_desc_decode(const uint8_t *in, size_t len, wsync_fabric_desc *out,
                                                wsync_error *err)
{
    uint64_t end;
    size_t k;
    wsync__error_reset(err);
    if (!out || (!in && len))
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, UINT64_MAX, NULL, 0, "%s", "desc_decode arguments");
    memset(out, 0, sizeof *out);
    if (len != WSYNC_FABRIC_DESC_WIRE)
        return wsync__fail(err, len < WSYNC_FABRIC_DESC_WIRE ? WSYNC_ERR_TRUNCATED : WSYNC_ERR_TRAILING_BYTES,
                           UINT64_MAX, NULL, 0, "a fabric descriptor is %u bytes, not %llu",
                           (unsigned)WSYNC_FABRIC_DESC_WIRE, (unsigned long long)len);
    out->backend = wsync__get_le32(in);
    out->kind = wsync__get_le32(in + 4);
    out->version = wsync__get_le32(in + 8);
    out->flags = wsync__get_le32(in + 12);
    out->addr = wsync__load_le64(in + 16);
    out->len = wsync__load_le64(in + 24);
    out->n_bytes = wsync__get_le32(in + 32);
    if (out->kind > WSYNC_MEM_CUDA)
        return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, 4, NULL, 0, "unknown memory kind %u", (unsigned)out->kind);
    if (out->len == 0 || !wsync_add_u64(out->addr, out->len, &end))
        return wsync__fail(err, WSYNC_ERR_OVERFLOW, 16, NULL, 0, "%s", "empty region or address + length overflows");
    if (out->n_bytes > WSYNC_FABRIC_DESC_MAX)
        return wsync__fail(err, WSYNC_ERR_OUT_OF_BOUNDS, 32, NULL, 0, "%u backend bytes, at most %u",
                           (unsigned)out->n_bytes, (unsigned)WSYNC_FABRIC_DESC_MAX);
    for (k = 36 + out->n_bytes; k < WSYNC_FABRIC_DESC_WIRE; k++)
        if (in[k]) return wsync__fail(err, WSYNC_ERR_INVALID_ARGUMENT, (uint64_t)k, NULL, 0, "%s", "nonzero padding");
    memcpy(out->bytes, in + 36, out->n_bytes);
    return WSYNC_OK;
}

WSYNC_DEF void wsync_fabric_close(wsync_fabric *f)
{
    if (f && f->close) f->close(f->user);
    if (f) memset(f, 0, sizeof *f);
}
#endif /* WSYNC_NO_CHAIN */


#endif /* WSYNC_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the wsync authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
*/
