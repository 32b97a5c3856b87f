/* wsync_rdma.h v0.6.0 - the direct path: one-sided writes into inference memory - MIT license */
/*
OVERVIEW
========
Inside a cluster, trainer ranks write weights straight into the inference
ranks' memory: the receiver registers a region, hands its descriptor to
the sender over any control channel, and the sender writes at offsets; the
receiving application's threads do nothing. This header provides backends
for the `wsync_fabric` interface of wsync.h ("Fabric: one-sided writes"):

    one-host  processes on one machine. Mode CMA: process_vm_writev straight
              into the receiver's memory (a syscall, no receiver CPU at all).
              Mode SHM, the fallback where ptrace rules forbid CMA: the
              region lives in a memfd (wsync_fabric_host_alloc) that the
              sender maps after receiving it over a Unix socket; a write is
              a memcpy.
    TCP       clusters without RDMA: a receiver thread (started by the
              first reg) reads framed writes and puts the bytes straight
              into the registered memory, checking region, key and bounds
              of every frame first.
    verbs     RDMA RC (InfiniBand or RoCE) through libibverbs: RDMA WRITE
              and WRITE_WITH_IMM from registered memory on one or several
              NICs; queue pairs are connected over a small TCP control
              connection (the receiver's listener thread, started by the
              first reg). Every verbs call goes through a table
              (wsync_verbs_ops): libibverbs loaded at run time by default,
              or the caller's (tests/rdma/fake_verbs.h is an in-memory one).

The verbs backend has NEVER RUN ON A NIC: it is tested only against the
fake provider in tests/rdma/fake_verbs.h. Expect the first run on hardware to
find what a fake cannot (provider limits, RoCE GID types, timeouts).

Above the fabrics, in this order in the header:
    executor    wsync_exec_run: tasks through stages (a thread and a FIFO
                each), staging bytes held in a ring whose length is the
                memory watermark, barriers between mesh groups;
                wsync_quantize_e4m3 is the fp8 preparation.
    controller  wsync_controller_* and wsync_rank_*: ranks join over TCP with
                their regions and tensors, the controller plans once with the
                planner (their JOINs are its input) and sends each trainer its
                tasks in plan order (ASSIGN); a step is GO,
                DONE (with what the trainer ran, checked against the plan),
                COMMIT, ACK, and may move only the tensors the trainers
                name; a failure aborts the step by name within the timeout.
                Trainers' writes that gather or quantize go through the
                executor. Every connection proves the job key both ways
                first (a challenge-response), then MACs every message;
                no key on an address other than loopback refuses to start
                unless insecure.
    planner     wsync_plan_*: the schedule for a whole cluster from a model's
                tensor list, and a simulator that predicts its time (the
                PLANNER and SIMULATOR sections below). The controller runs
                it on what ranks declare at join (wsync_ctl_plan_input_build;
                the greedy mapping of 0.1 is the schedule GREEDY, and AUTO's
                fallback for layouts the planner does not model); `wsync
                plan --demo` prints the plan push-demo runs (same digest).

QUICK START
===========
    #define WSYNC_IMPLEMENTATION
    #define WSYNC_RDMA_IMPLEMENTATION   (before any #include: see PLATFORM)
    #include "wsync_rdma.h"

    receiver:                                  sender:
    wsync_fabric f;                            wsync_fabric f;
    wsync_fabric_tcp_open(NULL, &f, &err);     wsync_fabric_tcp_options o = {0};
    f.reg(f.user, weights, n, WSYNC_MEM_HOST,  o.send_only = 1;
          &mr, &desc, &err);                   wsync_fabric_tcp_open(&o, &f, &err);
    wsync_fabric_desc_encode(&desc, wire);     f.reg(f.user, src, n, WSYNC_MEM_HOST, &smr, &unused, &err);
    ... send wire to the sender ...            wsync_fabric_desc_decode(wire, sizeof wire, &desc, &err);
                                               f.open_remote(f.user, &desc, &rem, &err);
                                               f.write(f.user, smr, 0, rem, 0, n, &err);
                                               f.flush(f.user, &err);   (the bytes are in place)
    wsync_fabric_close(&f);                    wsync_fabric_close(&f);

A sender must register its source memory too (`write` takes a registered
source); `send_only` keeps such a fabric from listening.
RDMA: wsync_fabric_verbs_open(&opts, &f, &err) in place of
wsync_fabric_tcp_open (opts.devices = "mlx5_0,mlx5_1" for two NICs); the
calls are the same.

SEMANTICS PER BACKEND
=====================
                 one-host CMA          one-host SHM          TCP
    write        process_vm_writev,    memcpy into the       frame to the receiver
                 done on return        mapping, done on      thread (sent from the
                                       return                source, no copy)
    write_imm    write, then the immediate on the Unix       after the bytes, in
                 socket; the receiver's thread queues it     the same stream
    flush        full fence; fails if a receiver went away   waits for an ack from
                 (its socket closed)                         every remote written to
    recv_imm     the region's queue of immediates (receiver side), in arrival order

    verbs
    write        RDMA WRITE requests of at most max_wr_bytes (and both ports'
                 max_msg_sz), posted and returned: not done on return.
                 Writes of split_min bytes per lane or more are split across
                 every lane on 4 KiB boundaries, shorter ones go round-robin.
                 Every signal_every-th request asks for a completion; a full
                 send queue (sq_depth, or ENOMEM from the provider) is polled
                 until it has room (back-pressure, bounded by timeout_ms).
                 Overlapping writes to one remote may land in any order
                 across lanes: flush between them.
    write_imm    the other lanes drained first (RC orders one queue pair
                 only), then the bytes and WRITE_WITH_IMM on lane 0: the
                 immediate arrives after every byte written to that remote.
    flush        every lane of every remote drained (an empty signaled write
                 after an unsignaled tail); timeout_ms bounds it.
    recv_imm     lane 0 of each connection posts rq_depth receives; its
                 connection thread polls the completions every millisecond
                 (no completion channel yet), queues each immediate on the
                 connection's region and posts the receive again.
    An error completion (named: IBV_WC_REM_ACCESS_ERR, RETRY_EXC_ERR, ...,
    with the NIC) breaks the remote, as does the control connection
    closing (the receiver exited or deregistered the region).

Writes check the source and destination bounds locally (WSYNC_ERR_OUT_OF_BOUNDS).
A remote whose receiver failed (exited, closed the connection, refused a
frame, stalled past the timeout) is broken: every later write and flush
fails with WSYNC_ERR_IO naming the reason; close it and open it again.
Calls on one fabric are not thread-safe with each other except recv_imm
(any thread) and the fabric's own receiver thread. Deregister a region only
when no sender writes to it any more: with CMA nothing can stop a write
already issued (dereg closes the senders' connections, which makes their
next write fail).

ONE-HOST: WHICH MODE
====================
The receiver's reg offers CMA for any memory and SHM for memory from
wsync_fabric_host_alloc (options.mode restricts either side). The
sender's open_remote, in AUTO mode, probes CMA with an 8-byte write to a
word the receiver keeps for this; if the kernel refuses (Yama
ptrace_scope, another uid, seccomp in a container) it takes SHM when
offered, and otherwise fails with the reason and what to change.
wsync_fabric_host_remote_mode says which mode a remote uses. The Unix
socket is a file in a 0700 directory of the receiver's own
($XDG_RUNTIME_DIR, else /tmp; removed at close), so other users cannot
connect, and both sides check the other's uid (SO_PEERCRED: the same, or
root): the processes share that directory's file system. The receiver's
allow_any_writer names each writer with PR_SET_PTRACER (never
PR_SET_PTRACER_ANY; see the option).

VERBS: NICS, LANES, CONNECTIONS
===============================
options.devices picks the NICs ("mlx5_0:1,mlx5_1", "all"; default: the
first active port); each has its own PD, and every region is registered
on each (its descriptor carries an rkey per NIC). Opening a remote makes
max(sender NICs, receiver NICs) lanes, lane i from the sender's NIC
i % S to the receiver's i % R, each an RC queue pair with its own CQ on
both sides, over one TCP control connection per remote. Queue pairs are
not shared across regions: an immediate carries 32 bits of the caller's
and nothing else, so the queue pair it arrives on is what names its
region. RoCE ports address peers by GID (is_global, GRH; the index from
options or the first IPv4-mapped one), InfiniBand ports by LID; both
sides must share the link layer. Each side picks a random 24-bit PSN.

VERBS WIRE FORMAT (little-endian)
=================================
    descriptor bytes (version 1): u16 control port, u8 host length (1..63),
           u8 NICs (1..8), u32 region, u64 key, u64 fabric instance,
           u32 rkey per NIC, host
    hello  32 bytes: "WSV1", version 1, total length, region, key (64),
           lanes (1..8), 0; then 40 bytes per lane
    reply  the same with "WSV2" and a status (0, or why it was refused) in
           place of the region, key 0
    lane   u32 the receiver's NIC index, u32 QP number (24 bits), u32 PSN
           (24 bits), u32 max message size, u16 LID, u8 RoCE (0/1), u8 MTU
           (IBV_MTU_256..4096), u8 port, 3 zero bytes, GID (16)
Both sides check every field against their own (lengths, version, ranges,
the NIC's link layer) before it reaches a verb; a peer that sends nothing,
or not all of it, within timeout_ms fails the handshake. After the reply
the connection carries nothing: its closing tells either side the other
went away, and the receiver then destroys its queue pairs.

TCP AUTHENTICATION
==================
Every TCP fabric connection starts with a handshake that proves both
sides hold the job key (wsync_fabric_auth_set or the options' job_key;
the same in every process of the job) and the region's 64-bit key from
the descriptor; then every frame is tagged, so that nothing without the
key writes a byte and nothing on the way alters one unnoticed:
    sender    hello: region, its sender id, a 32-byte random nonce
    receiver  challenge: its own nonce, and HMAC-SHA256(job key,
              "receiver" || hello || its nonce || region key)
    sender    checks that (else: "did not prove the job key"), sends the
              same HMAC labelled "sender"
    receiver  checks it (constant time), says yes or why not
The connection's key is the same HMAC labelled "connection key": both
nonces make it new on each connection, so frames replayed from another
connection fail. Each frame then carries a sequence number (1, 2, ... on
its connection: a replayed or dropped one is refused) and a 16-byte tag of
its header (HMAC-SHA256 under the connection's key), checked before any
byte lands; its data is followed by a Poly1305 tag (RFC 8439) under a
one-time key drawn from the same HMAC over the header. Poly1305 because
HMAC-SHA256 over every byte runs at about a tenth of loopback TCP's rate
(this header's SHA-256 is portable C); Poly1305 in portable C runs at
about 2 GB/s. The data's tag is checked after the bytes landed (they go
straight into the region): a mismatch is refused like any frame, so the
sender's flush fails and its step cannot commit. Acks are tagged too.
Without a job key the HMAC key is empty and the region's key (from the
descriptor: whoever was handed it) is the only secret, as before, but
it no longer travels in frames.
The receiver bounds what an unauthenticated peer can hold: the whole
handshake must end within auth_timeout_ms (1 s) of the accept; at most
max_unauthenticated (32) connections are in their handshake at once, and
one more closes the oldest of them, so idle or slow connections never keep
a real sender out; authenticated connections have max_connections slots
of their own. The write window (wsync_fabric_window_open/close) then
limits who writes when: only the sender ids the plan names, only between a
step's start and its commit. Every refusal is counted, kept in
stats.last_reject and given to options.log, starting with the peer's
address. What this does not do: encrypt. The bytes (the weights) are
readable by anyone who can capture the traffic; there is no TLS. The
sender ids are not secrets: any holder of the job key can claim any id,
so the window keeps out late or unplanned writers of the job, not a
holder of the key who lies. One-host and verbs writes are one-sided: the
one-host fabric relies on the kernel (the socket's 0700 directory, the
peer's uid, ptrace rules for CMA); the verbs fabric's control connection
still hands over the region's key (an rkey is a bearer secret on the NIC
anyway).

TCP WIRE FORMAT (little-endian)
===============================
    hello      56 bytes: "WSH3", version 1, region, sender id, nonce (32), 0 (64)
    challenge  72 bytes: "WSH4", status (0, or why it was refused), nonce (32),
               the receiver's proof (32)
    proof      40 bytes: "WSH5", 0, the sender's proof (32)
    done       16 bytes: "WSH6", status, 0 (64)
    frame  64 bytes: "WSF2", type (1 write, 2 write+imm, 3 flush), region,
           imm, offset (64), length (64), seq (64), 0 (64), tag (16); then
           length bytes and, when length > 0, their Poly1305 tag (16)
    ack    32 bytes: "WSA2", status (0, or the reason a frame was refused),
           seq (the frame's), tag (16)
The receiver checks magic, tag, sequence, type, region (the handshake's),
offset + length against the region, and the write window before a byte is
written; a refused frame gets an ack with the reason, its connection is
closed, and it is counted and logged (wsync_fabric_stats, options.log).

PLATFORM
========
Linux (all backends), POSIX threads. The implementation needs glibc's
GNU declarations (process_vm_writev, memfd_create, accept4): this header
defines _GNU_SOURCE itself when WSYNC_RDMA_IMPLEMENTATION is defined before
the first #include of the translation unit; otherwise define _GNU_SOURCE
there yourself. Without them (or off Linux, or with WSYNC_NO_THREADS) the
open functions fail with WSYNC_ERR_UNSUPPORTED and say why. No rdma-core
is needed to build or link: the verbs backend is compiled where
<infiniband/verbs.h> is found (WSYNC_RDMA_AVAILABLE 1; WSYNC_RDMA_NO_VERBS
leaves it out) and loads libibverbs.so.1 with dlopen when a fabric opens
with the default table; without it wsync_fabric_verbs_open fails with
WSYNC_ERR_UNSUPPORTED (no headers) or WSYNC_ERR_IO ("libibverbs not
found", "no RDMA devices"). Register memory within RLIMIT_MEMLOCK.
The implementation may sit in its own translation unit, apart from
wsync.h's: it uses only wsync.h's public API (under WSYNC_STATIC both go
in one file). Its default allocator is WSYNC_RDMA_MALLOC/WSYNC_RDMA_FREE
(define both or neither), else WSYNC_MALLOC/WSYNC_FREE where they are
defined, else malloc/free.
Senders should not rely on SIGPIPE being ignored: every send uses
MSG_NOSIGNAL.

PLANNER
=======
A weight update on the direct path is the same set of writes every step,
so it is planned once. Input (wsync_plan_input):

    sources  what trainers hold: every tensor as a rows x cols matrix (a
             vector is n x 1), bf16, row-sharded over the ranks of its mesh
             the way FSDP2 shards (torch.chunk: ceil(rows/count) rows per
             rank, the last ranks fewer or none);
    meshes   a range of trainer ranks, the mesh group it runs in (groups
             run one after another with a barrier between them: a mesh's
             collectives must not interleave with another's), and whether
             any rank of the mesh can reconstruct a whole tensor
             (gather = 1: the sender all-gathers the rows it needs first);
    units    what inference ranks need: one buffer assembled from 1..n
             source slices ("pieces", concatenated by rows, equal column
             counts: qkv_proj from q,k,v slices, w13 from gate and up) in a
             target dtype (bf16, or fp8 e4m3 with f32 scales per 128x128
             block of the assembled matrix), written identically to 1..n
             destinations (inference rank, region, byte offset; the scales
             to their own region and offset).

Output (wsync_plan): preparations and tasks. A preparation is what one
trainer rank does before sending (gather the pieces, fuse them, quantize),
producing one buffer: data then scales. A task is one write of (part of)
that buffer to one inference rank, on one NIC of each side. Tasks are
ordered per trainer rank (plan->tasks[rank_first[r] .. rank_first[r+1])),
mesh group first; a rank executes its tasks in that order per NIC.

How the planner chooses:
  - gather meshes: each unit's destinations are cut into chunks so that no
    chunk is a large part of a rank's share (a replicated tensor needed by
    128 ranks is prepared by several senders); chunks are taken largest
    first and each goes to the rank of the mesh whose bytes in this mesh
    group are fewest so far (ties: lower rank), which balances every group
    and so the whole;
  - row-shard meshes (gather = 0): a unit is cut at the holders' shard
    boundaries (for fp8 at 128-row block boundaries, where the first row's
    holder gathers the rest of the block) and each holder sends its rows;
    a column slice is strided in a row shard, so it is packed (GATHER);
    the rows a tile's first holder gathers are fetches (FETCH): each
    holder, the gatherer too, writes its rows into the gatherer's buffer
    over the fabric, in a gather phase that runs before the mesh group's
    tasks (in every group, once a plan has any);
  - NICs: each task takes, of the sender's K NICs and of the receiver's K
    NICs, the one with the fewest bytes in this group (then overall);
  - order: a list-scheduling pass of the simulator's model, per mesh
    group: whenever a sender NIC is free it takes, of its remaining tasks
    (the next one for each receiver NIC), the one that can start earliest
    (receiver free, preparation done), ties to the receiver with the most
    bytes still to come; each sender sends in the order of those starts,
    so at any moment the senders are spread over the receivers instead of
    queueing at the same one.
Each task keeps the start the ordering pass gave it (wsync_plan_task.start,
in bytes at line rate after its mesh group's start). An executor that
paces (wsync_controller_options.pace_gbps) writes no task before that
time, so the senders keep the plan: without pacing a sender that is early
takes a receiver the plan gave to someone else at that moment, and the
drift compounds (Kimi-K2 256 -> 8 x 16: 1.029x the bound paced, 1.075x
first come, first served).
The result is a pure function of the input and options (no clocks, no
addresses, no hash order): wsync_plan_digest is equal run to run.

SIMULATOR
=========
wsync_plan_simulate replays a plan, not bytes over bandwidth: per mesh
group (a barrier between groups), each trainer rank's preparation engine
runs its preparations in order (gather and fuse at copy_gbps, quantize at
quant_gbps, both on the source bytes; a FETCH preparation's rows are
already in its buffer) while holding their temporary bytes
(under an optional watermark), and each task starts when its preparation
is done, its sender NIC is free (tasks of a NIC in plan order) and its
receiver NIC is free (served first come, first served), then occupies
both for task_us plus len at the line rate. With pace_gbps (the
executor's pacing) a task also waits for its planned start; with the
default constants the paced replay is then the planner's own schedule. So a schedule that sends
everything to one receiver first, or a rank with more bytes than the
others, predicts slower than the bound. A plan with fetches runs each
group's gather phase first: every holder NIC writes its fetches in plan
order, each occupying it and the gatherer's receiving NIC (trainers
receive on their own NICs, full duplex) for task_us plus len at the line
rate, then a barrier, then the group's tasks.

Constants (wsync_plan_sim_options, zero meaning default). They model the
target cluster, not the machine the simulator runs on:
  nic_gbps    400 (per NIC, each direction): the line rate of the target's
              NICs;
  copy_gbps   nic_gbps * 13/8: a preparation copy (gather, fuse) runs
              somewhat faster than the wire, as a GPU's device copy does
              next to its NIC; the model's ratio of a local copy to a
              one-sided write of the same bytes;
  quant_gbps  copy_gbps: on a GPU, bf16 -> fp8 with block amax is a
              memory-bound elementwise kernel like a copy (a scalar CPU
              conversion is compute-bound and would say nothing about the
              deployment);
  task_us     5: posting a write, its completion, and the per-task queue
              hand-offs of the executor: a small fixed cost per task, of
              the order of an RDMA WRITE's post and poll;
  barrier_us  50: a barrier among a few hundred ranks over the control
              network (a round trip of a TCP message to the controller);
  cpus        0: every rank has cores of its own (the target: a GPU and its
              NICs per rank). On one host (push-demo --bench), where more
              ranks are busy than there are cores, cpus = the machine's
              cores: every group then lasts at least its CPU work over cpus,
              the work being each preparation's seconds (copy_gbps and
              quant_gbps are one core's rates), each task's task_us, and
              each write's bytes at the line rate holding min(1, cpus / S)
              of a core, S the group's sending NICs (nic_gbps is then one
              sender's rate while all S write at once, each on its share
              of the cores). A bound, not a replay of processor sharing: it
              is exact when the work keeps every core busy to the end, and
              the replay (each rank its own core) is exact when no more
              ranks are busy than there are cores.
  nic_senders 0: nic_gbps is the rate of one sender while all the group's
              senders write at once. With cpus, the number of senders that
              wrote at once when nic_gbps was measured (push-demo --bench:
              every trainer): a core then writes at nic_gbps * max(1,
              nic_senders / cpus), and a mesh group with fewer sending NICs
              than that (each group of --mesh-groups sends from half the
              trainers) writes faster per sender, at the same CPU work per
              byte. Without it, such a group counted its writes at the
              rate measured with every trainer sharing the cores: twice
              their CPU work on 4 trainers, 2 cores and two groups.

SPARSE STEPS
============
wsync_plan_sparse_simulate predicts a steady sparse step of a plan: the
pairs, regions and staging are the plan's, fixed once; only the sizes
follow the change densities (wsync_plan_sparse_options: bf16 elements
changed; fp8 bytes moved in 128x128 tiles whose scale held; tiles whose
scale moved, sent whole). A region (a task) costs a section header (32
bytes) plus, per change, a position (4) and the value (2 for bf16, 1 for
an fp8 code, 4 for a scale); it goes dense when that exceeds dense_above
of its dense bytes (default: where the rates break even, a sparse byte
costing the wire, the pack and the scatter, a dense byte the wire only)
or no longer fits its receiving NIC's staging (in plan order). The
phases run one after another, so the breakdown adds up to the total:
  diff      per mesh group, the slowest sender: every preparation's
            source bytes against the last step sent;
  quantize  fp8 preparations: the changed elements against the tile's
            kept scale, tiles whose amax moved quantized whole (at
            quant_gbps), and a preparation with a dense region quantized
            in full (a gather or fuse copied at copy_gbps, in pack);
  pack      the sparse regions' bytes into staging;
  wire      wsync_plan_simulate on the plan with each dense task as
            planned and each sender's sparse regions for one receiver (and
            mesh group) as one write of its slot (a 64-byte header, then
            the sections), each fetch as its rows' changes, preparations
            free, first come, first served; its barriers are in barriers;
  scatter   the slowest receiver: its staged bytes into the weights;
  verify    that receiver's digest of what the step wrote (verify_all:
            every byte of its regions);
  barriers  the simulation's, plus writes-done and commit.
Each phase's rate is a ratio to memcpy measured on one core by
bench/bench_sparse.c (WSYNC_PLAN_SPARSE_DIFF, _QUANT, _PACK, _SCATTER,
_VERIFY) times mem_gbps, a rank's memcpy rate on the target (default:
the simulation's copy_gbps, the dense step's preparation rate). pack,
scatter and the fp8 update are per change, bound by memory latency on a
CPU; on a GPU's memory they are not, which the one ratio cannot say:
mem_gbps is the knob. The model is a sum, not a pipeline, because the
ranks run one: a trainer's wsync_rank_push diffs every region, then
packs every slot, then writes (the dense regions last), and a receiver
validates every slot, scatters them, then runs on_commit, all after
COMMIT; only ranks overlap each other, which the slowest rank of each
phase stands for (a sender that wrote each region as soon as it was
packed would overlap diff, pack and the wire). One host (the
simulation's cpus): the ranks share the cores, so each sender phase of a
mesh group takes at least all its senders' work over cpus, and scatter
and verify all receivers' work over cpus (a phase hidden behind another
rank's longer one adds nothing: the bound is the larger). base_seconds:
a dense step of a run with sparse steps also copies what each sender
sent (the next diff's base), at mem_gbps (the diff's ratio already
counts that copy's changes in a sparse step).
The rates as the ranks run them, on this host, with the measured step
beside the prediction: make bench-sim-check (bench/bench_sim_check.sh).

REVISIONS
=========
    0.6.0  fetches: the rows of fp8 tiles across row shards are in the
           plan (WSYNC_PLAN_FETCH, wsync_plan_fetch, wsync_plan.fetches,
           in the digest of plans that have any; wsync_plan_stats.fetches
           and fetch_bytes), each holder's ordered in a rotation; the
           simulator runs each mesh group's gather phase as writes
           between trainers, then a barrier, and counts no copy for a
           fetched preparation (wsync_plan_sim_result.fetch_seconds); the
           controller's gather transfers are the plan's fetches; a failed
           step names every trainer that reached no barrier (or sent
           nothing), and a trainer whose connection closes right after
           another's failed write as gone; wsync_quantize_e4m3 without
           branches, in SSE2 and (chosen at run time) AVX2: the same
           codes and scales, 13x faster at -O2
    0.5.0  pacing: wsync_plan_task.start (the planned start; in the plan
           digest), wsync_plan_sim_options.pace_gbps,
           wsync_controller_options.pace_gbps, wsync_ctl_transfer.start_us,
           wsync_exec_task.start_s and wsync_exec_stats.pace_s; steps of a
           subset are not paced. Protocol version 3 (ASSIGN's reserved
           word is start_us, non-decreasing within a group);
           fp8 from row shards: the gather between trainers through a
           gather inbox (WSYNC_CTL_INBOX, targets at trainers,
           wsync_controller_plan.gather_transfers and gather_bytes); a
           step's timeout at a barrier names the trainer the others wait
           for, and so does a trainer's failed DONE while one lags (a
           writer to a stalled trainer's gather inbox); the planner's
           arrays of 4 MB and up from the default allocator ask for
           transparent huge pages (madvise); on one host the staging
           arena comes from wsync_fabric_host_alloc;
           wsync_plan_sim_options.nic_senders
    0.4.0  the simulator's cpus (ranks sharing the cores of one host: a
           group lasts at least its CPU work over the cores) and
           wsync_plan_sim_result.cpu_seconds;
           steps checked and steps of a subset: a trainer's DONE reports
           the tensors it named and the transfers it ran (bitmaps), and the
           controller refuses a step whose executed transfers are not the
           plan's (or the subset's), naming the trainer and the transfer;
           wsync_rank_select (a step moves only the tensors named),
           wsync_controller_step_tasks. Protocol version 2 (DONE's format)
    0.3.0  one schedule: the controller builds ASSIGN from the planner
           (wsync_ctl_plan_input_build turns the JOINs into its input:
           replica meshes, gather 2, for trainers holding whole tensors;
           torch.chunk row shards); each trainer's transfers are its plan
           tasks in plan order; wsync_controller_options.schedule (AUTO,
           PLAN, GREEDY: the old mapping, kept as a named alternative),
           wsync_controller_plan.digest, wsync_controller_plan_ref; the
           simulator's recv_gbps (negative: receivers are no resource).
           The ASSIGN wire format is unchanged (version 1): the per-NIC
           order is not sent (every fabric's write has no NIC argument)
    0.2.0  the implementation allocates through WSYNC_RDMA_MALLOC and
           WSYNC_RDMA_FREE (wsync.h's pair where defined, else malloc and
           free), so it builds in a translation unit of its own; WSYNC_STATIC
           builds warning-free; fabric kinds, preparation kinds and plan
           architectures are enums (wsync_fabric_kind, wsync_ctl_prep,
           wsync_plan_arch; names and values unchanged); internally one
           include block and one extern "C" for the implementation, the
           planner a section of pure computation, and private sub-prefixes
           with one meaning each
    0.1.0  the first release: the fabrics (TCP, one host, ibverbs), the
           executor, the controller protocol with its controller and ranks,
           the planner and its simulator

LICENSE
=======
MIT, as wsync.h.

CONTENTS
========
Every section's code carries a tag: search for it and the first hit is
its declarations, the second its implementation. A tag marked * has code
only in the implementation (one hit). tests/core/test_toc.sh checks this list.

    >>common      * errors, bytes, allocation, time, randomness, sockets
    >>receiver    * the fabrics' shared part: wire constants, regions,
                    immediates, the receiver thread
    >>fabric-tcp    the TCP fabric
    >>fabric-host   the one-host fabric (CMA, SHM)
    >>fabric-verbs  the ibverbs (RDMA RC) fabric
    >>executor      the executor: stages, a staging ring, fp8 preparation
    >>sparse        the sparse step: changes packed into staging slots, validated,
                    scattered
    >>ctl           the controller protocol, the controller and the ranks
    >>ctl-codec     the protocol's messages, encoded and decoded
    >>controller    the controller
    >>ctl-step    * the controller's step loop (go, transfer, finish)
    >>rank          a rank
    >>planner       the planner and its simulator (pure computation)
    >>plan-models   model layouts
    >>plan        * the planner
    >>simulator     the simulator: dense steps, and the sparse step's model

Private names are wsync__; the short sub-prefixes mean (macros: the same
in capitals):
    wsync__rdma_   helpers of every section (>>common; errors are wsync.h's
                   wsync_error_set), rdma_put / rdma_get (little-endian
                   bytes), rdma_alloc / rdma_free, rdma_in (bounds), time,
                   randomness, whole socket reads and writes, rdma_key_set /
                   rdma_key_mac (the job key); WSYNC__RDMA_OK
                   and WSYNC__HAVE_VERBS say what this build has
    wsync__fab_    the fabrics' shared part (>>receiver): fab_base (a
                   fabric's shared state), fab_srv_ (the receiver's
                   listener), fab_conn (one of its connections), fab_rej_str
                   (why a frame was refused; WSYNC__REJ_, WSYNC__FR_ and the
                   ACK_, IMM_, HELLO_, REPLY_ lengths and magics: the wire)
    wsync__tcp_    the TCP fabric
    wsync__host_   the one-host fabric (host_mem: its shared memory)
    wsync__vb_     the ibverbs fabric; with it vd_ (calls through the verbs
                   table), vlib_ (libibverbs loaded at run time), vops_ (the
                   default table), vsym (one symbol), vnic_ (a NIC), vqp_ (a
                   queue pair), vend_ (a queue pair's endpoint), vlane (a
                   lane), vmr_ (a region), vrem_ (a remote), vwc_ (a
                   completion), vrej_ / WSYNC__VREJ_ (a refused handshake),
                   vput_ / vpost_ (wire and posts), vclamp, vzero16
    wsync__exec_   the executor
    wsync__quant_  fp8 preparation (wsync_quantize_e4m3); its inlined
                   conversion keeps the name wsync__e4m3_sat, which
                   tests/rdma/test_exec.c calls
    wsync__sp_     the sparse step's slots (>>sparse); the ranks' part of
                   it is rank_sp_ (trainer) and rank_stg_ (receiver)
    wsync__ctl_    the controller protocol and the controller; ctl_rd_ (the
                   codec's byte reader, WSYNC__CTL_RD32/64)
    wsync__rank_   a rank of the controller protocol
    wsync__pl_     the planner and the simulator; plalloc, plgrow, plrsort,
                   pldiv_ (its helpers), plk_ (tensor kinds of a model),
                   WSYNC__PLE_ (simulator events)
*/
#if defined(WSYNC_RDMA_IMPLEMENTATION) && defined(__linux__) && !defined(_GNU_SOURCE) && !defined(_FEATURES_H)
#define _GNU_SOURCE 1
#endif

#ifndef WSYNC_RDMA_H
#define WSYNC_RDMA_H

#include "wsync.h"
#ifdef WSYNC_NO_CHAIN
#error "wsync_rdma.h needs wsync.h's runtime (the fabric interface): build without WSYNC_NO_CHAIN"
#endif

/* The ibverbs backend is compiled where rdma-core's headers are found
   (<infiniband/verbs.h>; Debian: libibverbs-dev), on Linux with threads;
   define WSYNC_RDMA_NO_VERBS to leave it out. Nothing links libibverbs:
   it is loaded at run time. WSYNC_RDMA_AVAILABLE says whether it is in. */
#if !defined(WSYNC_RDMA_NO_VERBS) && defined(__linux__) && !defined(WSYNC_NO_THREADS) && defined(__has_include)
#if __has_include(<infiniband/verbs.h>)
#define WSYNC__HAVE_VERBS 1
#endif
#endif
#ifndef WSYNC__HAVE_VERBS
#define WSYNC__HAVE_VERBS 0
#endif
#define WSYNC_RDMA_AVAILABLE WSYNC__HAVE_VERBS

#ifdef __cplusplus
extern "C" {
#endif

#define WSYNC_RDMA_REQUIRES_VERSION 100

#if WSYNC_VERSION_NUMBER < WSYNC_RDMA_REQUIRES_VERSION
#error "wsync_rdma.h needs a newer wsync.h"
#endif

/* The job key: the secret every process of one direct-path job
   shares. The controller and the ranks prove it to each other when they
   connect (wsync_controller_options.job_key, wsync_rank_options.job_key);
   a process without it joins nothing and is sent nothing. Any bytes, from
   WSYNC_JOB_KEY_MIN to WSYNC_JOB_KEY_MAX (e.g. 32 random bytes, or their
   hex). */
#define WSYNC_JOB_KEY_MIN 16u
#define WSYNC_JOB_KEY_MAX 256u
typedef struct wsync_job_key {
    uint8_t bytes[WSYNC_JOB_KEY_MAX];
    uint32_t len;                 /* 0: no key */
} wsync_job_key;

/* The key: `key` (len > 0) when given; else the environment variable
   WSYNC_JOB_KEY (its bytes); else the file named by WSYNC_JOB_KEY_FILE
   (its bytes, trailing CR/LF dropped); else none (out->len 0, WSYNC_OK).
   A key shorter than WSYNC_JOB_KEY_MIN or longer than WSYNC_JOB_KEY_MAX,
   or a file that cannot be read, fails naming where it came from
   (WSYNC_ERR_INVALID_ARGUMENT, WSYNC_ERR_IO), out->len 0. */
WSYNC_DEF wsync_result wsync_job_key_resolve(const void *key, size_t len, wsync_job_key *out, wsync_error *err);

/* ======================================================================
   The fabrics: TCP, one host, ibverbs
   ====================================================================== */

/* Backend ids (wsync_fabric.backend and wsync_fabric_desc.backend, which
   are uint32_t in wsync.h). */
typedef enum wsync_fabric_kind {
    WSYNC_FABRIC_VERBS = 1,   /* ibverbs RC RDMA WRITE */
    WSYNC_FABRIC_HOST = 2,    /* one host: process_vm_writev or shared memory */
    WSYNC_FABRIC_TCP = 3      /* TCP with a receiver thread */
} wsync_fabric_kind;

/* Counters of a fabric's receiver side since open. */
typedef struct wsync_fabric_stats {
    uint64_t connections;      /* accepted from senders */
    uint64_t frames;           /* TCP: write frames applied; one-host: immediates received */
    uint64_t bytes;            /* TCP: payload bytes written into regions */
    uint64_t imms;             /* immediates queued for recv_imm */
    uint64_t rejected;         /* frames or handshakes refused (magic, region, key, bounds):
                                  nothing written, the connection closed */
    uint64_t dropped;          /* connections that ended inside a frame (sender gone, or
                                  stalled past the timeout) */
    char last_reject[256];     /* why the last refusal happened, and from whom (the peer's address) */
} wsync_fabric_stats;

/* 1 and *out filled when f is a TCP, one-host or verbs fabric; 0 otherwise.
   verbs: frames counts immediates received; bytes stays 0 (the receiver
   sees none). */
WSYNC_DEF int wsync_fabric_stats_get(const wsync_fabric *f, wsync_fabric_stats *out);

/* Who may write (TCP AUTHENTICATION below). The job key (any bytes, 1 to
   1024 of them; the same in every process of the job) and this process's
   identity as a writer (a trainer's rank number; what a receiver's window
   lists). Call it before the first reg or open_remote: connections opened
   later use it. Same as the TCP options' job_key, job_key_len and
   sender_id. One-host and verbs fabrics keep the key but do not use it
   (one host: the peer's uid is what is checked). */
WSYNC_DEF wsync_result wsync_fabric_auth_set(wsync_fabric *f, const void *job_key, size_t key_len, uint32_t sender_id,
                                             wsync_error *err);

/* The write window (receiver side): from window_open until window_close
   the receiver accepts writes for step `step` from the n senders listed
   (their sender_id) and from no one else; outside a window it accepts
   none. Each refused frame is counted, logged with the peer's address and
   id, and writes nothing. A fabric on which neither was ever called
   accepts every authenticated sender at any time (the first call switches
   the window on for good: call window_close(f, 0, ...) first to start
   closed). TCP only: one-host and verbs writes are one-sided and cannot be
   refused by the receiver, and these fail there with
   WSYNC_ERR_UNSUPPORTED. n <= 65536. */
WSYNC_DEF wsync_result wsync_fabric_window_open(wsync_fabric *f, uint64_t step, const uint32_t *senders, size_t n,
                                                wsync_error *err);
WSYNC_DEF wsync_result wsync_fabric_window_close(wsync_fabric *f, uint64_t step, wsync_error *err);

/* ---- TCP >>fabric-tcp ------------------------------------------------ */

/* All zero (or NULL) means the defaults in brackets. */
typedef struct wsync_fabric_tcp_options {
    wsync_allocator allocator;
    const char *bind_host;         /* [127.0.0.1] where the receiver listens ("0.0.0.0", "::", a name) */
    unsigned port;                 /* [0: ephemeral] */
    const char *advertise_host;    /* [bind_host, or gethostname() for a wildcard] put in descriptors */
    unsigned connect_timeout_ms;   /* [5000] */
    unsigned timeout_ms;           /* [10000] flush's wait for acks, a stalled send, and at the
                                      receiver the rest of a frame once it started */
    unsigned socket_buffer;        /* [8 MiB] SO_SNDBUF and SO_RCVBUF, when the process may go past
                                      the system's caps (CAP_NET_ADMIN); else autotuning decides */
    unsigned chunk;                /* [4 MiB] bytes per send call */
    unsigned max_connections;      /* [256] authenticated connections served at once */
    int send_only;                 /* 1: reg never starts the receiver (a sender's fabric) */
    /* authentication (TCP AUTHENTICATION; wsync_fabric_auth_set does the same) */
    const void *job_key;           /* [none: the region's key from the descriptor alone] */
    size_t job_key_len;            /* 1..1024 bytes */
    uint32_t sender_id;            /* this process's identity as a writer [0] */
    unsigned auth_timeout_ms;      /* [1000] the whole handshake, at the receiver: a connection that
                                      has not proved the key by then is closed */
    unsigned max_unauthenticated;  /* [32] connections in their handshake at once; one more arriving
                                      closes the oldest (authenticated ones have their own slots) */
    void (*log)(void *user, const char *line); /* [none] each refusal, with the peer's address */
    void *log_user;
} wsync_fabric_tcp_options;

/* A TCP fabric. The receiver starts (listening) at the first reg unless
   send_only; its descriptors carry the advertised host and port, the
   region's id and a random 64-bit key. */
WSYNC_DEF wsync_result wsync_fabric_tcp_open(const wsync_fabric_tcp_options *opt, wsync_fabric *out,
                                             wsync_error *err);
/* The port the receiver listens on (0 before the first reg, or for another backend). */
WSYNC_DEF unsigned wsync_fabric_tcp_port(const wsync_fabric *f);

/* ---- one host >>fabric-host ------------------------------------------ */

typedef enum wsync_fabric_host_mode {
    WSYNC_FABRIC_HOST_AUTO = 0,    /* CMA when the kernel allows it, else SHM where offered */
    WSYNC_FABRIC_HOST_CMA = 1,     /* process_vm_writev only */
    WSYNC_FABRIC_HOST_SHM = 2      /* shared memory only */
} wsync_fabric_host_mode;

typedef struct wsync_fabric_host_options {
    wsync_allocator allocator;
    wsync_fabric_host_mode mode;   /* receiver: what reg offers; sender: what open_remote takes */
    int allow_any_writer;          /* receiver: name the writers as this process's ptracer
                                      (PR_SET_PTRACER), so that under Yama ptrace_scope 1 writers that
                                      are not its ancestors may use CMA: each writer that passed the
                                      handshake (same uid, its pid from SO_PEERCRED), or with several
                                      the nearest process they descend from (never pid 1). Never
                                      PR_SET_PTRACER_ANY. Process-wide; it also lets them ptrace it */
    int writer_pid;                /* receiver [0: none]: PR_SET_PTRACER naming this pid at open (a
                                      launcher: Yama lets it and its descendants use CMA) */
    unsigned timeout_ms;           /* [5000] the handshake at open_remote, a stalled send */
    int send_only;                 /* 1: reg never starts the receiver thread */
} wsync_fabric_host_options;

WSYNC_DEF wsync_result wsync_fabric_host_open(const wsync_fabric_host_options *opt, wsync_fabric *out,
                                              wsync_error *err);
/* Shared memory that reg can offer in SHM mode (a memfd, or shm_open where
   memfd_create is missing), mapped here at *ptr, zero-filled. */
WSYNC_DEF wsync_result wsync_fabric_host_alloc(wsync_fabric *f, uint64_t len, void **ptr, wsync_error *err);
/* Unmaps memory from wsync_fabric_host_alloc (deregister its regions first). */
WSYNC_DEF void wsync_fabric_host_free(wsync_fabric *f, void *ptr);
/* The mode an opened one-host remote writes with (CMA or SHM); AUTO when
   f or r is not one-host. */
WSYNC_DEF wsync_fabric_host_mode wsync_fabric_host_remote_mode(const wsync_fabric *f,
                                                               const wsync_fabric_remote *r);
/* 1 when this process may process_vm_writev into pid (an 8-byte probe:
   reads a word and writes it back, so use it only on memory nobody else
   writes, e.g. a child's); 0 and `why` filled otherwise. */
WSYNC_DEF int wsync_fabric_host_cma_allowed(int pid, const void *addr, char *why, size_t why_cap);

/* ---- ibverbs (RDMA RC) >>fabric-verbs ----------------------------------

   Every verbs call goes through wsync_verbs_ops, so that tests can put a
   fake provider (tests/rdma/fake_verbs.h) in place of libibverbs. The types are
   rdma-core's, declared here only as incomplete types: this part needs no
   <infiniband/verbs.h>; the implementation does. */

struct ibv_device;
struct ibv_context;
struct ibv_device_attr;
struct ibv_port_attr;
union ibv_gid;
struct ibv_pd;
struct ibv_mr;
struct ibv_cq;
struct ibv_comp_channel;
struct ibv_qp;
struct ibv_qp_init_attr;
struct ibv_qp_attr;
struct ibv_send_wr;
struct ibv_recv_wr;
struct ibv_wc;

/* The verbs the backend uses, with libibverbs' signatures, except that
   get_device_list (the only call without a verbs object to find its state
   through) takes `user`. */
typedef struct wsync_verbs_ops {
    void *user;
    struct ibv_device **(*get_device_list)(void *user, int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
    int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    const char *(*wc_status_str)(int status);   /* optional: NULL uses wsync's own names */
} wsync_verbs_ops;

#define WSYNC_VERBS_MAX_NICS 8

/* All zero (or NULL) means the defaults in brackets. */
typedef struct wsync_fabric_verbs_options {
    wsync_allocator allocator;
    const wsync_verbs_ops *ops;    /* [libibverbs, loaded at run time with dlopen("libibverbs.so.1")] */
    const char *devices;           /* [the first active port] NICs to use, comma-separated:
                                      "mlx5_0:1,mlx5_1" (no port: the device's first active one),
                                      or "all": every active port of every device */
    int use_gid_index;             /* 1: RoCE ports use gid_index; [0: the first IPv4-mapped GID
                                      (RoCE v2 over IPv4, usually), else the first non-zero one] */
    int gid_index;
    unsigned sq_depth;             /* [256] work requests outstanding per queue pair at most */
    unsigned signal_every;         /* [sq_depth / 4] every Nth write request asks for a completion */
    unsigned rq_depth;             /* [256] receives kept posted per connection (for write_imm) */
    unsigned max_wr_bytes;         /* [1 GiB, and both ports' max_msg_sz] bytes per work request */
    unsigned split_min;            /* [256 KiB] writes shorter than this per NIC use one NIC */
    /* the control connection (a TCP listener, started by the first reg) */
    const char *bind_host;         /* [127.0.0.1] */
    unsigned port;                 /* [0: ephemeral] */
    const char *advertise_host;    /* [bind_host, or gethostname() for a wildcard] */
    unsigned connect_timeout_ms;   /* [5000] */
    unsigned timeout_ms;           /* [10000] the handshake, flush's wait for completions, a full
                                      send queue */
    int send_only;                 /* 1: reg never starts the listener (a sender's fabric) */
} wsync_fabric_verbs_options;

/* An RDMA RC fabric over every NIC in options.devices. Fails with
   WSYNC_ERR_UNSUPPORTED when built without rdma-core's headers, and with
   WSYNC_ERR_IO naming what is missing when libibverbs, devices or active
   ports are not there. */
WSYNC_DEF wsync_result wsync_fabric_verbs_open(const wsync_fabric_verbs_options *opt, wsync_fabric *out,
                                               wsync_error *err);
/* The control listener's port (0 before the first reg, or for another backend). */
WSYNC_DEF unsigned wsync_fabric_verbs_port(const wsync_fabric *f);

/* Sender-side counters of a verbs fabric since open. */
typedef struct wsync_fabric_verbs_stats {
    unsigned n_nics;
    struct {
        char name[72];             /* "mlx5_0:1" */
        int ethernet;              /* 1: RoCE (GRH addressing), 0: InfiniBand (LID) */
        uint64_t bytes;            /* bytes of write requests posted through it */
        uint64_t wrs;              /* write requests posted */
    } nic[WSYNC_VERBS_MAX_NICS];
    uint64_t signaled;             /* requests that asked for a completion */
    uint64_t completions;          /* completions polled */
    uint64_t sq_full_waits;        /* posts that waited for a full send queue to drain */
    uint64_t enomem_retries;       /* post_send ENOMEM answered by polling and retrying */
    uint64_t imms;                 /* immediates sent */
} wsync_fabric_verbs_stats;

/* 1 and *out filled when f is a verbs fabric; 0 otherwise. */
WSYNC_DEF int wsync_fabric_verbs_stats_get(const wsync_fabric *f, wsync_fabric_verbs_stats *out);


/* ======================================================================
   The executor: stages, a staging ring, the memory watermark  >>executor
   ====================================================================== */

/* ---- the pipelined executor -------------------------------------------

   Every transfer of a step is a task that moves through up to
   WSYNC_EXEC_STAGES_MAX stages (e.g. stage-in copy, preparation: gather,
   fuse, quantize; the write), one thread per stage, a FIFO queue in front
   of each. A task holds tmp_bytes of the caller's staging arena from the
   moment it enters the first stage until it leaves the last; a task enters
   only while the bytes held by tasks in flight plus its own fit in the
   arena, so the arena's length is the memory watermark. Tasks leave in the
   order they entered (every stage is FIFO), so the arena is a ring.

   Tasks come in mesh groups (ascending): no task of group g + 1 enters
   before every task of group g has left the last stage and the barrier
   callback for g returned (the global barrier between mesh groups).

   Pacing: a task with start_s > 0 does not start its last stage (the
   write) before start_s seconds after the first task of its group entered,
   so a sender keeps the planned schedule instead of taking, early, a
   receiver the plan gave to another sender at that moment. Tasks stay in
   order: a late task delays the ones after it, never the reverse.

   A stage's failure stops admission; tasks already in flight drain without
   running further stages; the result names the task and the stage. */

#define WSYNC_EXEC_STAGES_MAX 4

typedef struct wsync_exec_task {
    uint64_t tmp_bytes;        /* staging bytes the task holds (0: none) */
    uint32_t group;            /* mesh group, ascending over the task list */
    void *user;                /* the caller's description of the work */
    double start_s;            /* [0] paced: the last stage starts it no earlier than this many
                                  seconds after its mesh group's first task entered */
} wsync_exec_task;

/* Runs one stage of task t; tmp points at its tmp_bytes in the arena, which
   start tmp_off bytes into it (for a write from a registered arena). */
typedef wsync_result (*wsync_exec_stage_fn)(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t tmp_off,
                                            wsync_error *err);

typedef struct wsync_exec_options {
    wsync_allocator allocator;
    uint8_t *staging;          /* the arena; its length is the watermark */
    uint64_t staging_len;
    unsigned n_stages;         /* 1..WSYNC_EXEC_STAGES_MAX */
    wsync_exec_stage_fn stages[WSYNC_EXEC_STAGES_MAX];
    const char *stage_names[WSYNC_EXEC_STAGES_MAX]; /* for errors and stats; NULL: "stage k" */
    /* After every task of `group` left the last stage; NULL: no barrier. */
    wsync_result (*barrier)(void *user, uint32_t group, wsync_error *err);
    void *user;
} wsync_exec_options;

typedef struct wsync_exec_stats {
    uint64_t tasks, groups;
    uint64_t peak_tmp_bytes;   /* the most staging bytes held at once */
    unsigned peak_active;      /* the most stages running a task at the same moment */
    double wall_s;
    double busy_s[WSYNC_EXEC_STAGES_MAX]; /* time each stage spent in its function */
    double wait_s;             /* time admission waited for the watermark */
    double pace_s;             /* time the last stage waited for planned starts (start_s) */
} wsync_exec_stats;

/* Runs every task through every stage. Fails before starting when a task
   needs more than the whole arena or groups are not ascending. */
WSYNC_DEF wsync_result wsync_exec_run(const wsync_exec_options *opt, const wsync_exec_task *tasks, size_t n,
                                      wsync_exec_stats *stats, wsync_error *err);

/* ---- preparation: fp8 quantization ----

   A rows x cols bf16 matrix (row stride in elements, so a column slice of
   a larger matrix works in place) to fp8 e4m3 with one f32 scale per
   block x block tile (block 0: one scale for the whole matrix), the
   DeepSeek-V3 convention of weight_scale_inv: scale = amax / 448 over the
   tile (1 when the tile is all zero, or holds an infinity or NaN), q =
   e4m3(w / scale) with saturation. dst: rows x cols bytes, row-major;
   scales: ceil(rows / block) x ceil(cols / block) floats, row-major. */
WSYNC_DEF wsync_result wsync_quantize_e4m3(const uint16_t *bf16, uint64_t rows, uint64_t cols, uint64_t stride,
                                           uint64_t block, uint8_t *dst, float *scales, wsync_error *err);
/* Scale tiles of a rows x cols matrix: ceil(rows/block) x ceil(cols/block), 1 for block 0. */
WSYNC_DEF uint64_t wsync_quantize_scale_count(uint64_t rows, uint64_t cols, uint64_t block);

/* ======================================================================
   The sparse step: changes packed into staging slots  >>sparse
   ======================================================================

   A step of RL training changes a few percent of the bf16 elements. In a
   sparse step a trainer diffs what it sends against what it sent last
   (wsync_diff), and for each receiver writes only the changes, one-sided,
   into a staging area the receiver registered (an inference entry named
   WSYNC_CTL_STAGING that covers one whole region); at COMMIT the receiver
   validates every slot, scatters the changes into its regions, and only
   then runs its on_commit (the verification) and moves its version.
   Nothing of a sparse step lands in live memory before COMMIT; a region
   whose changes would cost more than its dense bytes (wsync_rank_options.
   sparse_max), and every region of the first step, goes dense as before.

   The staging region of an inference rank is cut into n_trainers slots of
   wsync_sparse_slot_bytes each (fixed at plan time; 64-byte multiples),
   slot t for trainer rank t. Each trainer that writes to the rank fills
   its slot every step, the header at least (a trainer with nothing sparse
   says so: 0 sections, base 0). A slot (little-endian):

     header  64 bytes: magic "WSSP", version u16 (1), 0 u16, step u64,
             base u64 (the step the receiver must hold: the changes are
             against it; 0 when there are no sections), sender u32 (the
             trainer rank: the slot's index), sections u32, bytes u64 (after
             the header), digest u64 (wsync_digest of those bytes), 16 zero
     section 32 bytes: region u32 (the receiver's region index), elem u32
             (element bytes: 1, 2, 4 or 8), origin u64 (an element index in
             the region), count u64 (1 or more), 0 u64; then count u32
             positions, strictly ascending, each element origin + position
             of the region, padded with zeros to 8 bytes; then count values
             of elem bytes, padded with zeros to 8 bytes.

   A trainer writes one section per transfer that goes sparse (its rows are
   consecutive at the receiver, so its positions ascend); the positions
   are in the receiver's index space: after resharding and fusion, the
   element of the receiver's region. The receiver refuses (before writing
   any byte) a slot whose magic, version, step, sender, base, reserved bytes,
   digest or lengths are not as expected, a section outside the slot, a
   region it does not have (or the staging region), a position not
   ascending or past its region, or a count over what the slot holds; the
   error names the sender, the slot's byte offset and what is wrong.

   With the controller (the ranks do all of this): an inference rank that
   declares a staging entry gets, in every trainer's ASSIGN that writes to
   it, a target with WSYNC_CTL_TARGET_STAGING (the plan is unchanged: the
   entry is no tensor). A trainer with wsync_rank_options.sparse keeps a
   copy of each region its eligible transfers read (bf16 rows, 2-byte
   aligned, to a rank with staging; fp8 ones too, below); wsync_rank_push
   then, before the dense writes:
     diff    wsync_diff of each such region against the copy, 32 Ki
             elements at a time, each change's position and value kept and
             the copy brought up to date while both sides are in cache;
     decide  per receiver region (a target): the slot bytes of its
             transfers' changes against their dense bytes; sparse when at
             most sparse_max (WSYNC_SPARSE_MAX_DEFAULT), then, per rank,
             the largest sparse regions dense until the rest fits the slot
             (overflow);
     pack    one section per transfer of a sparse region, positions from
             its first destination element;
     write   its slot into each rank's staging (one write each, the header
             at least), the transfers packed marked run (DONE reports
             them as the plan's), the dense ones written as before.
   The step is sparse only when the copy is what the receivers hold: not
   the first step, nor the one after a push that failed, an ABORT the
   trainer saw, a step of a subset (wsync_rank_select), or
   wsync_rank_sparse_reset; those go dense and copy everything. At COMMIT
   an inference rank validates the slot of every trainer its OPEN named
   (base: its version), then scatters them all, then runs on_commit, then
   moves its version; any refusal fails the step with nothing written.
   wsync_rank_push_some writes no slot: with staging, push a step whole.
   The changes land in live memory only at COMMIT (the dense regions'
   bytes as before, during the step).

   fp8 receivers: a transfer with prep FP8 (the trainer quantizes, tiles of
   its block) goes sparse the same way. Besides the copy of its
   bf16 source, the trainer keeps the e4m3 bytes and scales it last sent of
   each such transfer: a byte an element and 4 bytes a tile, half the bf16
   bytes it reads (3 bytes an element with the source's copy). After the
   diff, per tile: no changed element, nothing; else, where a change may
   move the scale (its old or new byte at the top of the e4m3 grid, where
   the amax's holders are and any value above the amax saturates; a scale
   of 1 over a zero byte; a scale not normal), the scale computed again
   (the quantizer's own function on the same tile: the same bits as a dense
   step); when that moved, the tile quantized again and every byte of it
   sent with the scale; else each changed element's e4m3 byte (the
   quantizer's conversion, the same scale) sent where it differs from the
   byte sent last (e4m3's grid hides most small bf16 moves). A transfer
   packs one section of elem 1 (origin its first byte, positions row-major
   over its rows x cols) and one of elem 4 (origin scale_offset / 4,
   positions the tiles' indices): the format above, unchanged. decide
   weighs them against the e4m3 bytes and scales written dense. A dense
   step's preparation keeps what it quantized as the copy. After every
   step a receiver holds exactly the bytes and scales a dense step writes.

   fp8 from the gather inbox (row shards whose tiles cross trainers: the
   other holders write their rows into the inbox in the gather phase, mesh
   group 2g, during the push): such a transfer, in group 2g + 1, is handled
   after the barrier before its group, when every row is in place. The
   diff above leaves the inbox out (others write into it meanwhile); the
   copy of the inbox's region holds what each such transfer read last. Per
   group, each transfer's rows are diffed against that copy (several
   receivers' transfers read the same rows: the copy takes them only after
   all of the group's), compared per tile with the same rule, and decided
   per receiver region as above, apart from the region's other transfers
   (a region with both is decided, and counted in regions_sparse / _dense,
   once for each part); what fits after what the slot holds goes in it
   (overflow: dense). A rank that such transfers write to gets its slot
   after the last group that has one: the slot's sections are packed in
   sp_send, those appended, then the header and the one write (the format
   and the one slot per trainer and receiver as above). The gathers
   between trainers stay dense (bf16 rows into the inbox: no receiver's).
   wsync_sparse_stats.fp8_gathered counts such transfers written dense,
   fp8_gathered_sparse those sent in a slot; an inbox transfer in group 0
   (no barrier before it), or one that reads other bytes too, is always
   dense. */

#define WSYNC_SPARSE_MAGIC 0x50535357u /* "WSSP" */
#define WSYNC_SPARSE_VERSION 1u
#define WSYNC_SPARSE_HEADER 64u
#define WSYNC_SPARSE_SECTION 32u
/* An inference entry of this name is no tensor: dtype U8, one dimension,
   all rows, covering one whole region, it marks that region as the rank's
   staging for sparse steps (see above). */
#define WSYNC_CTL_STAGING "wsync:sparse-staging"
/* ASSIGN: a target whose region has this bit is the inference rank's
   staging region (region & ~bit); trainers write their slot there. */
#define WSYNC_CTL_TARGET_STAGING 0x80000000u

/* Builds a slot in buf[0, cap): begin, one section per run of changes,
   finish (which writes the header and returns the slot's bytes). */
typedef struct wsync_sparse_writer {
    uint8_t *buf;
    uint64_t cap, used;        /* used: header and sections so far */
    uint64_t step, base;
    uint32_t sender, sections;
    uint64_t changes;
} wsync_sparse_writer;

/* Each of n_trainers' slots in a staging region of len bytes (64-byte
   multiples; 0 when a slot cannot hold a header). */
WSYNC_DEF uint64_t wsync_sparse_slot_bytes(uint64_t len, uint32_t n_trainers);
/* A section's bytes for count changes of elem-byte elements. */
WSYNC_DEF uint64_t wsync_sparse_section_bytes(uint32_t elem, uint64_t count);
WSYNC_DEF void wsync_sparse_begin(wsync_sparse_writer *w, uint8_t *buf, uint64_t cap, uint64_t step, uint64_t base,
                                  uint32_t sender);
/* Reserves a section of count (1 .. 2^32 - 1) changes in region `region`
   at elements origin + pos[i]: *pos and *values point at where the caller
   writes them (positions strictly ascending, below 2^32). WSYNC_ERR_LIMIT,
   reserving nothing, when it does not fit in the slot. */
WSYNC_DEF wsync_result wsync_sparse_section(wsync_sparse_writer *w, uint32_t region, uint32_t elem, uint64_t origin,
                                            uint64_t count, uint32_t **pos, uint8_t **values, wsync_error *err);
/* The header, with the digest of the sections; returns the slot's bytes. */
WSYNC_DEF uint64_t wsync_sparse_finish(wsync_sparse_writer *w);

/* What the receiver expects of a slot. */
typedef struct wsync_sparse_expect {
    uint64_t step;             /* the step being committed */
    uint64_t base;             /* the receiver's version: what sections must be against */
    uint32_t sender;           /* the slot's trainer rank */
    uint32_t n_regions;
    const uint64_t *region_len; /* bytes of each region; 0: no section may name it (the staging) */
} wsync_sparse_expect;

typedef struct wsync_sparse_info {
    uint64_t bytes;            /* the slot's bytes, header included */
    uint32_t sections;
    uint64_t changes;
} wsync_sparse_info;

/* Checks a slot of cap bytes completely (see above) without writing
   anything; info (may be NULL) then says what it holds. */
WSYNC_DEF wsync_result wsync_sparse_validate(const uint8_t *slot, uint64_t cap, const wsync_sparse_expect *x,
                                             wsync_sparse_info *info, wsync_error *err);
/* Writes a slot's changes into the regions (region[i]: region i's
   memory). Only for a slot wsync_sparse_validate accepted with the same
   regions: it checks nothing. */
WSYNC_DEF void wsync_sparse_scatter(const uint8_t *slot, uint8_t *const *region);

/* ======================================================================
   The controller protocol, the controller and the ranks  >>ctl
   ====================================================================== */

/* ---- the controller protocol >>ctl-codec ------------------------------

   One controller, T trainer ranks and I inference ranks, over TCP. Every
   message is a 12-byte header, "WSC" + version byte, type (u16, then u16
   zero), payload length (u32, at most WSYNC_CTL_MAX_PAYLOAD), then the
   payload, all little-endian; after the handshake every frame is followed
   by its 32-byte MAC (below):

     HELLO     rank -> ctl   role u32, rank u32, nonce (32 random bytes)
     CHALLENGE ctl -> rank   nonce (32 random bytes), ctl_proof (32)
     PROOF     rank -> ctl   rank_proof (32)
     JOIN    rank -> ctl   role u32, rank u32, n_regions u32, n_tensors u32,
                           regions (n x WSYNC_FABRIC_DESC_WIRE bytes),
                           tensors (name_len u16, name, dtype u32, ndim u32,
                           shape u64 x ndim, row_begin u64, row_count u64,
                           region u32, offset u64, col_begin u64, col_count u64,
                           to_dtype u32, block u32, scale_offset u64, group u32)
     ASSIGN  ctl -> rank   role u32, rank u32, n_trainers u32, n_inference u32,
                           n_targets u32, n_transfers u32, n_groups u32, targets (rank u32,
                           region u32, descriptor), transfers (src_region u32,
                           target u32, src_offset u64, dst_offset u64, len u64,
                           rows u64, src_stride u64, prep u32, block u32,
                           scale_offset u64, group u32, start_us u32)
     GO      ctl -> trainer        step u64: write your transfers now
     DONE    trainer -> ctl        step u64, status u32, text_len u16, text,
                                   n_named u32, named bits, n_ran u32, runs u32,
                                   ran bits: what the trainer ran (below)
     COMMIT  ctl -> inference      step u64: every byte of the step is in place
     ACK     inference -> ctl      step u64, status u32, text_len u16, text
     ABORT   ctl -> all            step u64, status u32, text_len u16, text
     BYE     ctl -> all            (empty)
     ERROR   either way            step u64, status u32, text_len u16, text
     BARRIER trainer -> ctl        step u64, group u32: done with mesh group
     RELEASE ctl -> trainer        step u64, group u32: every trainer is
     OPEN    ctl -> inference      step u64, n u32, trainer ranks u32 x n (ascending):
                                   the trainers whose plan writes to this rank

   The handshake (every connection, before anything else): both sides hold
   the job key K (wsync_job_key_resolve; none: the empty key). With T =
   role, rank (u32 each), the rank's nonce, the controller's nonce, and
   H(label) = HMAC-SHA256(K, label with its NUL byte, then T)
   (wsync_ctl_auth_derive): ctl_proof = H("wsync-ctl 4 controller proof"),
   rank_proof = H("wsync-ctl 4 rank proof"), and the MAC keys
   H("wsync-ctl 4 controller to rank") and H("wsync-ctl 4 rank to
   controller"). The rank checks ctl_proof before it sends anything more
   (a controller without the key learns nothing but the HELLO); the
   controller checks rank_proof before it reads a JOIN (a rank without the
   key is sent nothing but the CHALLENGE and takes no slot); both in
   constant time. The JOIN must name the HELLO's role and rank. Then every
   frame either way carries HMAC-SHA256(its direction's key, seq u64 then
   the frame) (wsync_ctl_frame_mac), seq counting that direction's frames
   from 0: a forged, altered, replayed or reordered frame fails (the
   connection ends: WSYNC_ERR_AUTH), as does any frame of another
   connection (fresh nonces each). The controller reads handshakes without
   blocking, WSYNC__CTL_AUTH_MS (1 s) for the whole of each from its
   accept, at most WSYNC__CTL_PENDING at once (then one is cut: from the
   busiest host, a silent one first, then the oldest), and logs
   each refusal with the peer's address (wsync_controller_options.log). No
   TLS: the bytes (descriptors, plans) are readable on the wire.

   A rank's tensors: rows [row_begin, row_begin + row_count) along dim 0 of
   a tensor of the given full shape (a scalar is one row; the dims after the
   first are flattened into columns), and of those columns [col_begin,
   col_begin + col_count) (col_count 0: all), stored contiguously, row-major,
   from `offset` in its region `region`. Trainers hold row shards (all
   columns). An inference rank's entry may ask for a column slice (a
   tensor-parallel split of the input dimension) and for fp8 e4m3 (to_dtype,
   from bf16) with block x block tile scales (block 0: one scale) as f32 at
   scale_offset; several entries laid out back to back make a fused tensor
   (qkv_proj from q_proj, k_proj, v_proj). The controller maps every
   inference rank's rows to trainer ranks holding the same rows of the same
   tensor (name, dtype and shape equal) and tells each trainer what to write
   where (ASSIGN): with the planner (schedule PLAN, and AUTO where it models
   the layout: trainers' rows whole or torch.chunk shards) a trainer's
   transfers are its plan tasks one for one in plan order, mesh group first;
   with GREEDY each entry's rows go to the holder with the fewest bytes
   assigned so far (an fp8 entry whole from one trainer: a tile's scale
   needs all of it), consecutive writes merged. A transfer writes `len` bytes at dst_offset: rows
   rows of len / rows bytes each, read from src_offset with src_stride bytes
   between rows; with prep FP8 each row is len / rows bf16 elements read and
   e4m3 bytes written, and the tile scales go to scale_offset.

   fp8 from row shards (PLAN): a tile whose rows several trainers hold is
   gathered first. Each holder, the tile's first row's holder included,
   writes its rows of the tile (bf16, the entry's columns) into that
   holder's gather inbox (its entry WSYNC_CTL_INBOX; a target whose rank is
   n_inference + trainer rank); these transfers run in mesh group 2g and
   the group's other writes in 2g + 1 (every group split so, n_groups
   doubled, when any tile needs it), so the barrier between them puts every
   row in place before the holder quantizes from its inbox. In a step of a
   subset a write from the inbox counts as reading what its holder's own
   gather into that spot reads (the tile's tensor).

   Mesh groups: a trainer entry names the mesh group its writes run in (a
   mesh's collectives, e.g. an all-gather of expert shards, must not
   interleave with another mesh's); each trainer's transfers come ordered by
   group, and between groups every trainer flushes, sends BARRIER and waits
   for RELEASE, which the controller sends once every trainer is through
   that group (a trainer with nothing in a group still takes part).

   A step: OPEN to every inference rank and an ACK from each (a rank given
   its fabric opens the fabric's write window, wsync_fabric_window_open, to
   those trainers' sender ids: their trainer ranks; where the fabric cannot
   refuse writes, one-host and verbs, it has none), GO to every trainer, a
   DONE from each (after its writes and a flush), COMMIT to every inference
   rank (the window closes before on_commit: nobody may write from then
   on; an aborted step's window stays open to its writers until the next
   OPEN), an ACK from each (after its on_commit callback); only then does
   the step count. An inference rank's window is closed from its join.

   What a step moves: every trainer's transfers, or the subset named by the
   trainers (the tensors that changed this step, wsync_rank_select). A
   trainer's DONE says which of its tensors it named (n_named: its JOIN's
   tensor count, with a bit per tensor, or WSYNC_CTL_NAMED_ALL and no bits:
   the whole step) and which of its transfers it ran (n_ran: its ASSIGN's
   transfer count, a bit per transfer; runs: writes run, a transfer run
   twice counting twice). Bits are LSB first, ceil(n / 8) bytes, the unused
   bits of the last byte zero. Before COMMIT the controller checks every
   trainer's report against the plan: the step includes a tensor (by name)
   when any trainer named it (every tensor when any trainer named all), and
   includes a transfer when the transfer reads (source bytes overlapping)
   an included tensor; each trainer must have run exactly the transfers of
   its plan the step includes, each once. Otherwise the step fails, naming
   the trainer, the transfer and its tensor (so a trainer that left out a
   tensor another named, or an executor that skipped or repeated a write,
   never commits). Any failure (a DONE or ACK with an error, a peer gone, a
   timeout) aborts the step: every rank gets ABORT (a trainer waiting at a
   barrier stops waiting), inference ranks keep their version word at the
   last step they committed (one that already ACKed this step keeps it: its
   bytes are complete); the bytes of an aborted step are partly written
   (this path writes into live memory) until a later step commits. */

#define WSYNC_CTL_VERSION 4u
#define WSYNC_CTL_HEADER 12u
#define WSYNC_CTL_NONCE 32u   /* HELLO's and CHALLENGE's nonces */
#define WSYNC_CTL_MAC 32u     /* CHALLENGE's and PROOF's proofs; the MAC after every later frame */
#define WSYNC_CTL_MAX_PAYLOAD (16u << 20)
#define WSYNC_CTL_NAME_MAX 255u
#define WSYNC_CTL_DIMS_MAX 8u
#define WSYNC_CTL_TEXT_MAX 255u
#define WSYNC_CTL_MAX_RANKS 65536u
#define WSYNC_CTL_GROUPS_MAX 64u
#define WSYNC_CTL_NAMED_ALL 0xFFFFFFFFu /* DONE's n_named: the step moves every tensor */

typedef enum wsync_ctl_type {
    WSYNC_CTL_JOIN = 1,
    WSYNC_CTL_ASSIGN = 2,
    WSYNC_CTL_GO = 3,
    WSYNC_CTL_DONE = 4,
    WSYNC_CTL_COMMIT = 5,
    WSYNC_CTL_ACK = 6,
    WSYNC_CTL_ABORT = 7,
    WSYNC_CTL_BYE = 8,
    WSYNC_CTL_ERROR = 9,
    WSYNC_CTL_BARRIER = 10,
    WSYNC_CTL_RELEASE = 11,
    WSYNC_CTL_HELLO = 12,     /* the handshake (before any other message; no MAC) */
    WSYNC_CTL_CHALLENGE = 13,
    WSYNC_CTL_PROOF = 14,
    WSYNC_CTL_OPEN = 15       /* ctl -> inference: a step's write window (answered by ACK) */
} wsync_ctl_type;

typedef enum wsync_ctl_role {
    WSYNC_CTL_TRAINER = 1,
    WSYNC_CTL_INFERENCE = 2
} wsync_ctl_role;

typedef struct wsync_ctl_tensor {
    const char *name;          /* 1..WSYNC_CTL_NAME_MAX bytes, no NUL inside */
    uint32_t dtype;            /* wsync_dtype, whole bytes per element */
    uint32_t ndim;             /* 0..WSYNC_CTL_DIMS_MAX */
    uint64_t shape[WSYNC_CTL_DIMS_MAX]; /* the whole tensor's shape */
    uint64_t row_begin, row_count;      /* the rows held (all: 0, shape[0]) */
    uint32_t region;           /* index into the rank's regions */
    uint64_t offset;           /* byte offset of row row_begin in that region */
    uint64_t col_begin, col_count;      /* the columns held (col_count 0: all) */
    uint32_t to_dtype;         /* inference: the dtype wanted (0: dtype; F8_E4M3 from BF16) */
    uint32_t block;            /* fp8: tile size of the scales (0: one scale) */
    uint64_t scale_offset;     /* fp8: where the f32 scales start in the region */
    uint32_t group;            /* trainers: the mesh group its writes run in */
} wsync_ctl_tensor;

/* A trainer entry of this name is no tensor: dtype U8, one dimension, all
   rows, it marks bytes of one of the trainer's regions as its gather
   inbox. fp8 from row shards needs one: a 128-row tile's scale needs every
   row of the tile at one sender, so before a mesh group's writes the
   trainers write the rows of tiles that cross their shard boundaries into
   the inbox of the tile's first row's holder (a gather phase, then a
   barrier), which quantizes from there. The controller fails the plan,
   naming the trainer and the bytes it needs, when an inbox is missing or
   too small. */
#define WSYNC_CTL_INBOX "wsync:gather-inbox"

/* A region a trainer writes into: inference rank `rank`'s, or, for rank
   >= n_inference, trainer rank - n_inference's gather inbox (the gather
   between trainers of row-sharded fp8, WSYNC_CTL_INBOX). */
typedef struct wsync_ctl_target {
    uint32_t rank, region;
    wsync_fabric_desc desc;
} wsync_ctl_target;

/* What a trainer does to a transfer's rows before writing them
   (wsync_ctl_transfer.prep). */
typedef enum wsync_ctl_prep {
    WSYNC_CTL_PREP_NONE = 0,
    WSYNC_CTL_PREP_FP8 = 1    /* bf16 rows -> e4m3 with tile scales */
} wsync_ctl_prep;

/* One write: len bytes to targets[target] at dst_offset, made of `rows`
   rows read from the trainer's region src_region at src_offset, src_stride
   bytes apart (rows 1: len contiguous bytes). */
typedef struct wsync_ctl_transfer {
    uint32_t src_region, target;
    uint64_t src_offset, dst_offset, len;
    uint64_t rows, src_stride;
    uint32_t prep, block;      /* wsync_ctl_prep; fp8 tile size */
    uint64_t scale_offset;     /* fp8: the target's offset for the scales */
    uint32_t group;            /* mesh group (transfers ascend by group) */
    uint32_t start_us;         /* paced: not written before this many microseconds after the
                                  group's start (the plan's start at the controller's pace_gbps;
                                  0: at once); non-decreasing within a group */
} wsync_ctl_transfer;

/* A decoded message; the arrays belong to it (wsync_ctl_msg_free). To
   encode, fill the fields the type uses; the rest are ignored. */
typedef struct wsync_ctl_msg {
    uint32_t type;                          /* wsync_ctl_type */
    uint32_t role, rank;                    /* JOIN, ASSIGN, HELLO */
    uint8_t nonce[WSYNC_CTL_NONCE];         /* HELLO CHALLENGE */
    uint8_t mac[WSYNC_CTL_MAC];             /* CHALLENGE PROOF */
    uint32_t n_trainers, n_inference;       /* ASSIGN */
    uint64_t step;                          /* GO DONE COMMIT ACK ABORT ERROR BARRIER RELEASE */
    uint32_t group;                         /* BARRIER RELEASE */
    uint32_t n_groups;                      /* ASSIGN: mesh groups every trainer passes */
    uint32_t status;                        /* DONE ACK ABORT ERROR: a wsync_result */
    char text[WSYNC_CTL_TEXT_MAX + 1];      /* DONE ACK ABORT ERROR */
    uint32_t n_regions;                     /* JOIN */
    wsync_fabric_desc *regions;
    uint32_t n_tensors;                     /* JOIN */
    wsync_ctl_tensor *tensors;
    uint32_t n_targets;                     /* ASSIGN */
    wsync_ctl_target *targets;
    uint32_t n_transfers;                   /* ASSIGN */
    wsync_ctl_transfer *transfers;
    uint32_t n_named;                       /* DONE: WSYNC_CTL_NAMED_ALL, or the trainer's tensors */
    uint8_t *named;                         /* DONE: n_named bits (not for ALL): tensors named as changed */
    uint32_t n_ran, runs;                   /* DONE: the trainer's transfers; writes run */
    uint8_t *ran;                           /* DONE: n_ran bits: the transfers run this step */
    uint32_t n_senders;                     /* OPEN: the trainers that write to this rank */
    uint32_t *senders;                      /* OPEN: their ranks, ascending */
    void *storage_;                         /* decode's one allocation */
    wsync_allocator alloc_;
} wsync_ctl_msg;

/* Encodes header and payload into out[0, cap). *len gets the size needed;
   WSYNC_ERR_LIMIT when cap is smaller (out may be NULL to ask). Checks what
   decode checks about the fields it writes. */
WSYNC_DEF wsync_result wsync_ctl_encode(const wsync_ctl_msg *m, uint8_t *out, size_t cap, size_t *len,
                                        wsync_error *err);
/* Checks a header: magic, version, type, length cap. */
WSYNC_DEF wsync_result wsync_ctl_header(const uint8_t *h, size_t len, uint32_t *type, uint32_t *payload_len,
                                        wsync_error *err);
/* Decodes and checks a payload of the given type completely: counts
   against the bytes present before anything is allocated, every length,
   dtype, shape, row range and region bound (a JOIN's tensor must lie inside
   its region's length), every descriptor, and that nothing trails. */
WSYNC_DEF wsync_result wsync_ctl_decode(uint32_t type, const uint8_t *payload, size_t len,
                                        const wsync_allocator *a, wsync_ctl_msg *out, wsync_error *err);
/* A whole frame (header + payload, exactly). */
WSYNC_DEF wsync_result wsync_ctl_decode_frame(const uint8_t *buf, size_t len, const wsync_allocator *a,
                                              wsync_ctl_msg *out, wsync_error *err);
WSYNC_DEF void wsync_ctl_msg_free(wsync_ctl_msg *m);
/* A rank's tensor entry as stored: bytes of one row (its columns, in
   to_dtype) and of all its rows; checks dtypes, the row and column ranges
   and overflow. */
WSYNC_DEF wsync_result wsync_ctl_tensor_bytes(const wsync_ctl_tensor *t, uint64_t *row_bytes, uint64_t *bytes,
                                              wsync_error *err);

/* The handshake's values (see the protocol), from the job key (len 0: no
   key, an empty HMAC key), the role and rank of the HELLO and both nonces. */
typedef struct wsync_ctl_auth {
    uint8_t ctl_proof[WSYNC_CTL_MAC];   /* CHALLENGE's: the controller has the key */
    uint8_t rank_proof[WSYNC_CTL_MAC];  /* PROOF's: the rank has it */
    uint8_t to_rank[32], to_ctl[32];    /* the MAC keys of each direction */
} wsync_ctl_auth;
WSYNC_DEF void wsync_ctl_auth_derive(const wsync_job_key *key, uint32_t role, uint32_t rank,
                                     const uint8_t nonce_rank[WSYNC_CTL_NONCE],
                                     const uint8_t nonce_ctl[WSYNC_CTL_NONCE], wsync_ctl_auth *out);
/* The MAC after a frame (header and payload, len bytes) sent after the
   handshake: HMAC-SHA256 under its direction's key of seq (u64, from 0 in
   each direction, one per frame) then the frame. */
WSYNC_DEF void wsync_ctl_frame_mac(const uint8_t key[32], uint64_t seq, const uint8_t *frame, size_t len,
                                   uint8_t out[WSYNC_CTL_MAC]);

/* ---- the controller >>controller ---- */

typedef struct wsync_controller wsync_controller;

struct wsync_plan;
struct wsync_plan_options;

/* How the controller maps inference bytes to trainers
   (wsync_controller_options.schedule). */
typedef enum wsync_ctl_schedule {
    WSYNC_CTL_SCHEDULE_AUTO = 0,   /* the planner when the ranks' layout is one it models
                                      (wsync_ctl_plan_input_build), else GREEDY */
    WSYNC_CTL_SCHEDULE_PLAN = 1,   /* the planner (wsync_plan_build); a layout it does not model
                                      fails accept with the reason */
    WSYNC_CTL_SCHEDULE_GREEDY = 2  /* each inference entry's rows from the holder with the fewest
                                      bytes so far, in the inference ranks' order (0.1's mapping) */
} wsync_ctl_schedule;

typedef struct wsync_controller_options {
    wsync_allocator allocator;
    const char *bind_host;          /* [127.0.0.1] */
    unsigned port;                  /* [0: ephemeral] */
    unsigned n_trainers, n_inference; /* required, each at least 1 */
    unsigned join_timeout_ms;       /* [30000] until every rank joined */
    unsigned step_timeout_ms;       /* [30000] GO to the last DONE, COMMIT to the last ACK */
    uint32_t schedule;              /* wsync_ctl_schedule [AUTO] */
    /* the planner's options (allocator: the controller's; nics_per_rank 0 or 1:
       the fabrics' write has no NIC argument, a verbs fabric spreads a write
       over its lanes itself) */
    const struct wsync_plan_options *plan;
    /* [0: no pacing] PLAN: each transfer carries its task's planned start
       (wsync_plan_task.start) read at this line rate, and a trainer writes
       no transfer before its group's start plus that (wsync_exec_task.start_s):
       the senders keep the plan's schedule instead of taking receivers first
       come, first served. Pace at the rate the fabric runs; a higher one
       paces less, a lower one slows the step to it. Steps of a subset
       (wsync_rank_select) are not paced. */
    double pace_gbps;
    /* The job key (wsync_job_key_resolve: these bytes, else WSYNC_JOB_KEY,
       else WSYNC_JOB_KEY_FILE): only ranks that prove it join. Without one
       the controller listens on a loopback address only, unless insecure. */
    const void *job_key;
    size_t job_key_len;
    int insecure;                   /* [0] 1: no key on any address (a trusted network) */
    /* Each connection refused (no key, a wrong one, a malformed or late
       handshake, a refused JOIN), one line with the peer's address [NULL:
       to stderr]. */
    void (*log)(void *user, const char *line);
    void *log_user;
} wsync_controller_options;

/* What the plan asks of the ranks. */
typedef struct wsync_controller_plan {
    uint64_t transfers, bytes;      /* all trainers together, per step */
    uint64_t max_trainer_bytes, min_trainer_bytes;
    uint64_t max_inference_bytes;
    uint32_t schedule;              /* the one used: WSYNC_CTL_SCHEDULE_PLAN or _GREEDY */
    uint32_t groups;                /* mesh groups */
    uint64_t digest;                /* PLAN: wsync_plan_digest of the plan (0: GREEDY) */
    uint64_t gather_transfers, gather_bytes; /* of transfers and bytes: trainer to trainer (the
                                               gather of fp8 tiles across row shards) */
    char why_greedy[160];           /* AUTO that fell back: why the planner did not take it */
} wsync_controller_plan;

/* Listens (bind_host, port). */
WSYNC_DEF wsync_result wsync_controller_open(const wsync_controller_options *opt, wsync_controller **out,
                                             wsync_error *err);
WSYNC_DEF unsigned wsync_controller_port(const wsync_controller *c);
/* Waits for every rank's JOIN (a JOIN that is malformed, out of range or
   a duplicate gets ERROR and is dropped; the wait goes on), plans, and
   sends each rank its ASSIGN. A plan that cannot cover every inference
   rank's rows fails with the tensor and rows named, and every rank gets
   ERROR. */
WSYNC_DEF wsync_result wsync_controller_accept(wsync_controller *c, wsync_error *err);
WSYNC_DEF void wsync_controller_plan_get(const wsync_controller *c, wsync_controller_plan *out);
/* The planner's plan the ranks execute (after accept, schedule PLAN), or
   NULL (GREEDY); it belongs to the controller. Its tasks of trainer r are
   r's ASSIGN transfers to inference ranks one for one, in order, except the
   fp8 scale tasks (WSYNC_PLAN_SCALES), which the transfer of their data
   task writes; with fp8 from row shards r's ASSIGN also holds the gather
   transfers to trainers' inboxes (targets of rank >= n_inference), which
   are no plan tasks. */
WSYNC_DEF const struct wsync_plan *wsync_controller_plan_ref(const wsync_controller *c);
/* One step: go, then finish. Steps increase. */
WSYNC_DEF wsync_result wsync_controller_step(wsync_controller *c, uint64_t step, wsync_error *err);
/* GO to every trainer. */
WSYNC_DEF wsync_result wsync_controller_go(wsync_controller *c, uint64_t step, wsync_error *err);
/* Every DONE, then COMMIT and every ACK; on any failure ABORT to every
   inference rank and the reason in err (which rank, what). */
WSYNC_DEF wsync_result wsync_controller_finish(wsync_controller *c, uint64_t step, wsync_error *err);
/* The last finished step's times in seconds: GO sent to the last DONE
   (the writes), and COMMIT sent to the last ACK (the receivers' callbacks). */
WSYNC_DEF void wsync_controller_step_times(const wsync_controller *c, double *transfer_s, double *commit_s);
/* The last finished step's transfers, all trainers together, as the trainers
   reported running them and the controller checked them against the plan
   (the whole plan, or the subset the trainers named), and their bytes. */
WSYNC_DEF void wsync_controller_step_tasks(const wsync_controller *c, uint64_t *tasks, uint64_t *bytes);
/* Connections refused so far, and the last one's line (as logged). */
WSYNC_DEF unsigned wsync_controller_refused(const wsync_controller *c, char *last, size_t cap);
/* BYE to every rank still there, and closes. */
WSYNC_DEF void wsync_controller_close(wsync_controller *c);

/* ---- a rank >>rank ---- */

typedef struct wsync_rank wsync_rank;

typedef struct wsync_rank_options {
    wsync_allocator allocator;
    const char *host;               /* the controller [127.0.0.1] */
    unsigned port;                  /* required */
    uint32_t role, rank;            /* wsync_ctl_role; rank from 0 within the role */
    const wsync_ctl_tensor *tensors;
    uint32_t n_tensors;
    wsync_fabric *fabric;           /* trainers write through it; regions registered on it */
    wsync_fabric_mr *const *mrs;    /* the rank's regions, registered */
    const wsync_fabric_desc *descs; /* their descriptors, as reg returned them */
    uint32_t n_regions;
    unsigned timeout_ms;            /* [30000] connect and the wait for ASSIGN; trainers: GO */
    uint64_t staging_bytes;         /* trainers: [64 MiB, or the largest prepared transfer] the
                                       executor's staging arena (the memory watermark) for
                                       transfers that gather or quantize */
    /* Inference: called in the rank's thread at COMMIT, before the version
       word moves; an error result (with err filled) refuses the step. */
    wsync_result (*on_commit)(void *user, uint64_t step, wsync_error *err);
    /* Inference: called at ABORT. */
    void (*on_abort)(void *user, uint64_t step, const char *why);
    void *user;
    /* The job key (as the controller's); the controller must prove it
       before the rank sends it anything but its HELLO. */
    const void *job_key;
    size_t job_key_len;
    /* Trainers: sparse steps (the sparse step, above) to every inference rank that has a
       staging region: each step after the first that committed, the
       changes since the last step sent, per receiver region, where they
       cost at most sparse_max of its dense bytes; the rest dense. Off: the
       rank still writes its slots' headers (nothing sparse). */
    int sparse;
    double sparse_max;              /* [WSYNC_SPARSE_MAX_DEFAULT] staged bytes over dense bytes */
} wsync_rank_options;

/* The default of wsync_rank_options.sparse_max: slot bytes over dense
   bytes (about 3x the fraction of bf16 elements changed). Measured with
   push-demo on qwen3-0.6b, 4 trainers to 2 inference ranks over CMA
   (--sparse --sparse-max 1 --staging 0.5 --density 0.05 and 0.10, one
   sparse step between dense ones, a 2-core guest under load): a region's
   own cost, pack + wire + scatter, was 0.51 of its dense write at 0.15
   (5%) and 0.9 at 0.30 (10%), so the two meet near 0.33; with the diff's
   per-change work counted too, the whole step met the dense one near 0.18
   (6%). 0.25 lies between: a region goes sparse while its changes cost
   clearly less than writing it. */
#define WSYNC_SPARSE_MAX_DEFAULT 0.25

/* What the last step did sparsely (wsync_rank_sparse_stats). */
typedef struct wsync_sparse_stats {
    uint64_t step;                  /* the step these are of (0: none yet) */
    /* trainers (push) */
    uint32_t regions_sparse, regions_dense; /* receiver regions written each way */
    uint32_t regions_overflow;      /* of the dense: their changes did not fit the slot */
    uint64_t changes;               /* elements sent sparse */
    uint64_t staged_bytes, dense_bytes; /* slot bytes written; bytes written dense */
    double diff_s, pack_s;          /* diff against the last step sent; count, decide, pack */
    double wire_s;                  /* the slots' writes, the dense writes, the flush */
    double update_s;                /* the copy of what was sent, brought up to date */
    /* trainers, fp8 receivers (a sparse step's diff): tiles quantized and compared with
       what was sent last; of them, those whose bytes moved under the same scale (their
       moved bytes sent) and those whose scale moved (the whole tile and the scale) */
    uint64_t fp8_tiles, fp8_tiles_moved, fp8_tiles_rescaled;
    uint64_t fp8_bytes, fp8_moved;  /* the e4m3 bytes compared; those sent (moved, or in a rescaled tile) */
    /* fp8 transfers quantized from this trainer's gather inbox (rows of other trainers'
       shards): packed after the gather's barrier; those written dense (the first step, a
       region over sparse_max or its slot, or a transfer that cannot go sparse), and those
       sent in a slot */
    uint32_t fp8_gathered, fp8_gathered_sparse;
    double fp8_s;                   /* the quantize and compare (within diff_s) */
    /* inference (COMMIT) */
    uint64_t scattered;             /* changes written from the slots */
    double validate_s, scatter_s;   /* every slot checked; then scattered */
    double commit_s;                /* on_commit (the application's verification) */
} wsync_sparse_stats;

/* Connects, sends JOIN, waits for ASSIGN; a trainer opens its targets on
   the fabric; an inference rank starts its thread (COMMIT, ABORT, BYE). */
WSYNC_DEF wsync_result wsync_rank_join(const wsync_rank_options *opt, wsync_rank **out, wsync_error *err);
/* Trainer: the next GO's step; *bye = 1 (and WSYNC_OK) when the controller
   said BYE. WSYNC_ERR_LIMIT after timeout_ms (negative: no limit). */
WSYNC_DEF wsync_result wsync_rank_wait_go(wsync_rank *r, uint64_t *step, int *bye, int timeout_ms,
                                          wsync_error *err);
/* Trainer: the step last given by wait_go moves only these tensors (names
   as in this rank's JOIN: the ones that changed this step); push and
   push_some then run only the transfers that read one of them, and DONE
   tells the controller which were named. Every trainer names the changed
   tensors it holds (the controller fails a step in which a trainer left
   out a transfer of a tensor another named). Without a call the step
   moves everything; n 0 moves nothing. A name this rank does not hold
   fails with WSYNC_ERR_INVALID_ARGUMENT, naming it, and changes nothing.
   Call after wait_go and before the step's first push. */
WSYNC_DEF wsync_result wsync_rank_select(wsync_rank *r, const char *const *names, uint32_t n, wsync_error *err);
/* Trainer: every assigned write of the step last given by wait_go (of
   the selection, if any), mesh group by group: between groups a flush,
   BARRIER, and the wait for the controller's RELEASE (every trainer is
   through the group); then a flush. */
WSYNC_DEF wsync_result wsync_rank_push(wsync_rank *r, wsync_error *err);
/* Trainer: assigned writes [first, first + count) (wsync_rank_transfers;
   of the selection, if any), and a flush when flush is 1: to start with
   the tensors that are ready. No mesh-group barriers: for a plan of one
   group. */
WSYNC_DEF wsync_result wsync_rank_push_some(wsync_rank *r, uint32_t first, uint32_t count, int flush,
                                            wsync_error *err);
/* Trainer: DONE for the step with result (and the message in why, if any),
   and what the rank ran since wait_go: the tensors selected and every
   transfer written (the controller checks them against the plan). */
WSYNC_DEF wsync_result wsync_rank_done(wsync_rank *r, uint64_t step, wsync_result result, const char *why,
                                       wsync_error *err);
/* Trainer: what the last push did (executor statistics). */
WSYNC_DEF void wsync_rank_push_stats(const wsync_rank *r, wsync_exec_stats *out);
/* The last step's sparse work: a trainer's push, an inference rank's COMMIT. */
WSYNC_DEF void wsync_rank_sparse_stats(const wsync_rank *r, wsync_sparse_stats *out);
/* Trainer: the next push goes dense, as the first does (a periodic full
   step, or a measurement of one). */
WSYNC_DEF void wsync_rank_sparse_reset(wsync_rank *r);
/* Trainer: the assigned writes. */
WSYNC_DEF const wsync_ctl_transfer *wsync_rank_transfers(const wsync_rank *r, uint32_t *n);
/* Inference: the last committed step (0 before the first), read with
   acquire ordering; the word itself, for polling without a call. */
WSYNC_DEF uint64_t wsync_rank_version(const wsync_rank *r);
WSYNC_DEF const volatile uint64_t *wsync_rank_version_word(const wsync_rank *r);
/* Inference: waits until the version is at least step (WSYNC_OK), the
   controller aborted a step at or above it or said BYE (WSYNC_ERR_NO_PATH
   is not used: WSYNC_ERR_IO with the reason), or timeout_ms passed
   (WSYNC_ERR_LIMIT). */
WSYNC_DEF wsync_result wsync_rank_wait_version(wsync_rank *r, uint64_t step, int timeout_ms, wsync_error *err);
/* Inference: 1 once the controller said BYE or went away; *why then. */
WSYNC_DEF int wsync_rank_ended(wsync_rank *r, char *why, size_t cap);
WSYNC_DEF void wsync_rank_close(wsync_rank *r);

/* ======================================================================
   The planner and its simulator (pure computation)  >>planner
   ======================================================================
   Pure computation: no fabric, socket or thread. It needs nothing else of
   this header and can be read on its own. */

/* Preparation flags (wsync_plan_prep.flags). */
#define WSYNC_PLAN_GATHER 1u /* assemble rows from the mesh's shards, or pack a strided column slice */
#define WSYNC_PLAN_FUSE 2u   /* several pieces concatenated into one buffer */
#define WSYNC_PLAN_QUANT 4u  /* bf16 -> fp8 e4m3 with f32 scales per 128x128 block */
/* Task flag: this write carries the preparation's scales (from src_offset = out_bytes). */
#define WSYNC_PLAN_SCALES 8u
/* Preparation flag, with GATHER: rows come from other ranks of a row-shard
   mesh; every holder writes its rows into the preparing rank's buffer
   (wsync_plan.fetches) in a gather phase before the mesh group's tasks. */
#define WSYNC_PLAN_FETCH 16u

#define WSYNC_PLAN_BLOCK 128u      /* fp8 scale block: 128 x 128 elements */
#define WSYNC_PLAN_MAX_NICS 64u
#define WSYNC_PLAN_MAX_RANKS 1048576u
#define WSYNC_PLAN_MAX_GROUPS 64u

/* ---- input ---- */

typedef struct wsync_plan_source {
    uint64_t rows, cols;   /* the whole tensor as a matrix (a vector: n x 1) */
    uint32_t dtype;        /* wsync_dtype as trainers hold it (BF16) */
    uint32_t mesh;         /* index into meshes: the ranks that shard it */
} wsync_plan_source;

typedef struct wsync_plan_mesh {
    uint32_t first, count; /* trainer ranks [first, first + count) */
    uint32_t group;        /* mesh group: groups run in increasing order */
    uint32_t gather;       /* 1: any rank of the mesh can reconstruct a tensor (all-gather);
                              2: every rank of the mesh holds every row (a replica: no gather) */
} wsync_plan_mesh;

/* Rows [row0, row0 + rows) and columns [col0, col0 + cols) of a source. */
typedef struct wsync_plan_piece {
    uint32_t source;
    uint64_t row0, rows, col0, cols;
} wsync_plan_piece;

typedef struct wsync_plan_dest {
    uint32_t rank, region;         /* inference rank, its region */
    uint64_t offset;               /* byte offset of the unit's buffer there */
    uint32_t scale_region;         /* fp8 units: where the scales go */
    uint64_t scale_offset;
} wsync_plan_dest;

typedef struct wsync_plan_unit {
    uint64_t first_piece, n_pieces; /* into pieces, concatenated by rows */
    uint64_t first_dest, n_dests;   /* into dests */
    uint32_t dtype;                 /* target: BF16 (as the source) or F8_E4M3 */
} wsync_plan_unit;

typedef struct wsync_plan_input {
    uint32_t n_trainers, n_inference;
    const wsync_plan_source *sources;
    uint64_t n_sources;
    const wsync_plan_mesh *meshes;
    uint32_t n_meshes;
    const wsync_plan_piece *pieces;
    uint64_t n_pieces;
    const wsync_plan_dest *dests;
    uint64_t n_dests;
    const wsync_plan_unit *units;
    uint64_t n_units;
} wsync_plan_input;

typedef struct wsync_plan_options {
    wsync_allocator allocator;
    uint32_t nics_per_rank;      /* [1] on every trainer and inference rank */
    uint64_t max_tasks;          /* [1 << 26] refuse plans with more */
    uint32_t chunks_per_rank;    /* [8] gather meshes: a unit's destinations are cut so that a
                                    chunk is at most 1/chunks_per_rank of a rank's mean share */
    uint64_t task_cost_bytes;    /* [250000] a task's start-up counted as this many bytes when
                                    ordering (5 us at 400 Gb/s) */
    double prep_speed;           /* [13/8] a preparation stage's rate over the line rate, when
                                    ordering (the simulator's default copy_gbps / nic_gbps) */
} wsync_plan_options;

/* ---- output ---- */

typedef struct wsync_plan_prep {
    uint32_t rank, group;        /* the trainer rank that prepares and sends it */
    uint32_t flags;              /* WSYNC_PLAN_GATHER | FUSE | QUANT, or 0: sent from the shard */
    uint32_t dtype;              /* of the buffer */
    uint64_t unit;               /* the input unit */
    uint64_t out_row0, rows, cols; /* rows [out_row0, out_row0 + rows) of the unit's matrix */
    uint64_t first_piece, n_pieces; /* into plan->pieces: exactly those rows */
    uint64_t src_bytes;          /* source bytes read */
    uint64_t out_bytes, scale_bytes; /* the buffer: data, then scales */
    uint64_t temp_bytes;         /* memory the preparation holds until its last task is sent */
    uint64_t n_tasks;
} wsync_plan_prep;

typedef struct wsync_plan_task {
    uint32_t prep, group;
    uint32_t src_rank, src_nic;  /* nic: 0..nics_per_rank-1 of that rank */
    uint32_t dst_rank, dst_nic;
    uint32_t region, flags;      /* flags: WSYNC_PLAN_SCALES or 0 */
    uint64_t src_offset;         /* in the preparation's buffer (or the shard when flags are 0) */
    uint64_t dst_offset, len;
    uint64_t start;              /* planned start after its mesh group's start, in bytes at line
                                    rate (the ordering pass's clock: seconds = start * 8 / bits
                                    per second); the fp8 scales start with their data */
} wsync_plan_task;

/* One holder's rows of a FETCH preparation: a write of bf16 rows from the
   holder's shard into the preparing rank's buffer, trainer to trainer. */
typedef struct wsync_plan_fetch {
    uint32_t prep;               /* the preparation (its rank receives) */
    uint32_t holder;             /* the trainer rank that holds the rows and writes them */
    uint32_t src_nic, dst_nic;   /* of the holder, of the preparing rank */
    uint64_t piece;              /* into plan->pieces: the piece the rows belong to */
    uint64_t row0, rows;         /* rows [row0, row0 + rows) of the piece's source, whole piece width */
    uint64_t dst_offset;         /* in the preparation's buffer (row-major, bf16, prep->cols wide) */
    uint64_t len;                /* bytes: rows * piece cols * 2 */
} wsync_plan_fetch;

typedef struct wsync_plan {
    wsync_allocator allocator;
    uint32_t n_trainers, n_inference, nics_per_rank, n_groups;
    wsync_plan_prep *preps;
    uint64_t n_preps;
    wsync_plan_piece *pieces;
    uint64_t n_pieces;
    wsync_plan_task *tasks;      /* ordered: by trainer rank, then group, then send order */
    uint64_t n_tasks;
    uint64_t *rank_first;        /* n_trainers + 1 */
    uint64_t *send_bytes;        /* per trainer NIC: rank * nics_per_rank + nic */
    uint64_t *recv_bytes;        /* per inference NIC */
    wsync_plan_fetch *fetches;   /* the gather phases (see FETCH), by holder: each holder's in the
                                    order it writes them */
    uint64_t n_fetches;
} wsync_plan;

typedef struct wsync_plan_stats {
    uint64_t tasks, preps, scale_tasks, bytes;
    uint64_t send_max, send_min, recv_max, recv_min;
    double send_mean, recv_mean;
    double imbalance_send, imbalance_recv; /* busiest NIC over the mean */
    uint64_t temp_max;           /* the largest single preparation's temporary bytes */
    uint64_t fetches, fetch_bytes; /* the gather phases' writes between trainers */
} wsync_plan_stats;

/* Plans. Checks the input completely first (ranges, slices inside their
   sources, equal column counts in a unit, pieces of one unit in meshes of
   one group, dtypes, overflow); WSYNC_ERR_LIMIT above max_tasks. */
WSYNC_DEF wsync_result wsync_plan_build(const wsync_plan_input *in, const wsync_plan_options *opt, wsync_plan **out,
                                        wsync_error *err);
WSYNC_DEF void wsync_plan_free(wsync_plan *p);
WSYNC_DEF void wsync_plan_stats_get(const wsync_plan *p, wsync_plan_stats *s);
/* wsync_digest of the plan serialized field by field, little-endian: equal
   plans, equal digests, on any platform. */
WSYNC_DEF uint64_t wsync_plan_digest(const wsync_plan *p);
/* Recomputes send_bytes/recv_bytes and rank_first from the tasks (after a
   caller reordered or edited them); fails if tasks are not grouped by rank. */
WSYNC_DEF wsync_result wsync_plan_reindex(wsync_plan *p, wsync_error *err);

/* ---- simulation >>simulator ---- */

#define WSYNC_PLAN_SIM_GROUPS 8u

typedef struct wsync_plan_sim_options {
    wsync_allocator allocator;
    double nic_gbps;    /* [400] */
    double copy_gbps;   /* [nic_gbps * 13 / 8] gather, fuse */
    double quant_gbps;  /* [copy_gbps] */
    double task_us;     /* [5] (negative: 0) */
    double barrier_us;  /* [50] (negative: 0) */
    uint64_t watermark; /* [0: none] temporary bytes per trainer rank */
    double recv_gbps;   /* [nic_gbps] a receiving NIC's rate (a task runs at the slower of its
                           two NICs); negative: receivers are no resource (one host: CMA or
                           SHM writes cost the receiver nothing) */
    double cpus;        /* [0: every rank a core of its own] one host: the cores that all ranks'
                           preparations and writes share; a group then takes at least its CPU
                           work over cpus (SIMULATOR) */
    double pace_gbps;   /* [0: no pacing] the executor paces (wsync_controller_options.pace_gbps):
                           a sender starts no task before its mesh group's start plus the task's
                           planned start (wsync_plan_task.start) read at this rate */
    double nic_senders; /* [0: each group's own] with cpus: how many senders were writing at once
                           when nic_gbps was measured; a group of S sending NICs then writes at
                           nic_gbps * max(1, nic_senders / cpus) * min(1, cpus / S) each
                           (SIMULATOR) */
} wsync_plan_sim_options;

typedef struct wsync_plan_sim_result {
    double seconds;          /* predicted: from the first group's start to the last write's end */
    double bound_seconds;    /* bytes of the busiest NIC (either side) over its line rate */
    double prep_max_seconds; /* the busiest preparation stage's busy time (gather or quantize, any rank) */
    double group_seconds[WSYNC_PLAN_SIM_GROUPS]; /* the first groups' durations */
    uint32_t n_groups;
    uint64_t peak_temp;      /* the most temporary bytes any rank held */
    uint64_t watermark_overruns; /* preparations started over the watermark to avoid a deadlock */
    uint64_t events;
    double cpu_seconds;      /* cpus > 0: the groups' CPU work over the cores, barriers between
                                (seconds is at least this); 0 otherwise */
    double fetch_seconds;    /* the gather phases (plans with fetches), their barriers included */
} wsync_plan_sim_result;

WSYNC_DEF wsync_result wsync_plan_simulate(const wsync_plan *p, const wsync_plan_sim_options *opt,
                                           wsync_plan_sim_result *out, wsync_error *err);

/* ---- a sparse step's model (SPARSE STEPS) ----

   Change densities, measured by bench/bench_sparse.c on the generator's
   qwen3-0.6b (steady state, step 1 -> 2; the real AdamW trajectory of
   tests/fixtures/corpus changes more, 4.2-6.7%, being tiny and fresh): */
#define WSYNC_PLAN_SPARSE_BF16 0.0161        /* bf16 elements changed per step (1.6086%) */
#define WSYNC_PLAN_SPARSE_FP8_BYTES 0.0013   /* fp8 bytes moved, in tiles whose scale held, of all (0.1304%) */
#define WSYNC_PLAN_SPARSE_FP8_SCALES 0.00015 /* tiles whose scale moved (sent whole), of all (4 of 26880) */
/* Phase rates as ratios to memcpy of one core, measured in one run by
   bench/bench_sparse.c (AMD EPYC Zen 4, December 2026); the model applies
   them to the target's memory rate (wsync_plan_sparse_options.mem_gbps): */
#define WSYNC_PLAN_SPARSE_DIFF 1.10     /* wsync_diff: bf16 bytes of one buffer */
#define WSYNC_PLAN_SPARSE_PACK 0.048    /* changes into staging: packed bytes */
#define WSYNC_PLAN_SPARSE_SCATTER 0.074 /* staging into the weights: packed bytes */
#define WSYNC_PLAN_SPARSE_VERIFY 1.76   /* wsync_digest: bytes digested */
#define WSYNC_PLAN_SPARSE_QUANT 0.0060  /* the incremental fp8 update: bf16 bytes of the changed elements */

/* The phases of a sparse step, in the order the model adds them. */
enum {
    WSYNC_PLAN_PHASE_DIFF = 0,    /* senders: the diff against the last step sent */
    WSYNC_PLAN_PHASE_QUANT = 1,   /* senders: the fp8 update of the changed elements (whole tiles whose scale moved) */
    WSYNC_PLAN_PHASE_PACK = 2,    /* senders: the changes into each receiver's staging layout */
    WSYNC_PLAN_PHASE_WIRE = 3,    /* the writes: the plan's tasks replayed at their sparse sizes */
    WSYNC_PLAN_PHASE_SCATTER = 4, /* receivers: staging into the weights */
    WSYNC_PLAN_PHASE_VERIFY = 5,  /* receivers: the digest before the version moves */
    WSYNC_PLAN_PHASE_BARRIER = 6, /* the mesh groups' barriers, writes-done and commit */
    WSYNC_PLAN_PHASES = 7
};

typedef struct wsync_plan_sparse_options {
    double bf16;            /* [WSYNC_PLAN_SPARSE_BF16] a step's changed bf16 elements (negative: 0) */
    double fp8_bytes;       /* [WSYNC_PLAN_SPARSE_FP8_BYTES] moved fp8 bytes, in tiles whose scale held
                               (negative: 0) */
    double fp8_scales;      /* [WSYNC_PLAN_SPARSE_FP8_SCALES] tiles whose scale moved (negative: 0) */
    double mem_gbps;        /* [the simulation's copy_gbps] a rank's memcpy rate on the target: each
                               phase runs at its ratio of it */
    double diff, quant, pack, scatter, verify; /* [WSYNC_PLAN_SPARSE_*] the ratios */
    uint32_t pos_bytes;     /* [4] a change's position in staging */
    uint32_t section_bytes; /* [32] a region's header in staging (WSYNC_SPARSE_SECTION) */
    double dense_above;     /* [0: where the rates break even] a region goes dense when its sparse bytes
                               exceed this fraction of its dense bytes */
    double staging;         /* [0: no limit] staging per receiving NIC, a fraction of its dense bytes:
                               regions that do not fit, in plan order, go dense */
    uint32_t verify_all;    /* 1: receivers digest every byte of their regions; 0: what the step wrote */
} wsync_plan_sparse_options;

typedef struct wsync_plan_sparse_result {
    double seconds;                     /* the sum of phase[] */
    double phase[WSYNC_PLAN_PHASES];    /* seconds on the critical path, by WSYNC_PLAN_PHASE_ */
    uint32_t bound;                     /* the phase with the most seconds */
    uint64_t wire_bytes;                /* written by the sparse step (fetches included) */
    uint64_t dense_bytes;               /* by the dense step */
    uint64_t sparse_tasks, dense_tasks; /* regions sent sparse, and dense (threshold or staging) */
    uint64_t staging_max;               /* the most staged bytes on a receiving NIC */
    double dense_above;                 /* the threshold used */
    double base_seconds;                /* a dense step of a run with sparse steps (the first, or one that
                                           goes dense) adds this to wsync_plan_simulate's: each sender's
                                           copy of what it sent (bf16 sources, at mem_gbps), the next
                                           diff's base; the slowest sender per mesh group (SPARSE STEPS) */
} wsync_plan_sparse_result;

/* Predicts a steady sparse step of plan p (SPARSE STEPS): the plan's pairs,
   regions and staging, sizes from the densities; sim: the constants of
   wsync_plan_simulate (NULL: its defaults). */
WSYNC_DEF wsync_result wsync_plan_sparse_simulate(const wsync_plan *p, const wsync_plan_sim_options *sim,
                                                  const wsync_plan_sparse_options *opt,
                                                  wsync_plan_sparse_result *out, wsync_error *err);
/* "diff", "quantize", "pack", "wire", "scatter", "verify", "barriers"; NULL past the last. */
WSYNC_DEF const char *wsync_plan_phase_name(uint32_t phase);

/* ---- model layouts >>plan-models ---- */

/* A model's architecture (wsync_plan_model.arch). */
typedef enum wsync_plan_arch {
    WSYNC_PLAN_ARCH_QWEN = 1, /* Qwen2/Qwen3: GQA attention, SwiGLU MLP */
    WSYNC_PLAN_ARCH_MLA = 2   /* DeepSeek-V3 / Kimi-K2: latent attention, MoE */
} wsync_plan_arch;

/* A model's shape (public configuration values, shared/design/MODELS.md). */
typedef struct wsync_plan_model {
    const char *name;
    uint32_t arch;              /* wsync_plan_arch */
    uint64_t vocab, hidden, layers, inter, heads, kv_heads, head_dim;
    uint32_t qk_norm, qkv_bias, tied;
    uint64_t dense_layers, experts, shared_experts, moe_inter; /* MoE (arch MLA) */
    uint64_t q_lora, kv_lora, qk_nope, qk_rope, v_head;         /* MLA */
    uint32_t served_fp8;        /* served in fp8 e4m3 with block scales */
} wsync_plan_model;

typedef struct wsync_plan_tensor_info {
    char name[96];              /* Hugging Face name */
    uint64_t rows, cols;        /* cols 1 for a vector */
    uint32_t ndim;
    uint32_t kind;              /* internal kind id */
    uint32_t layer, expert;     /* UINT32_MAX when not applicable */
} wsync_plan_tensor_info;

/* "qwen3-0.6b", "qwen2.5-7b", "kimi-k2"; WSYNC_ERR_NOT_FOUND otherwise. */
WSYNC_DEF wsync_result wsync_plan_model_lookup(const char *name, wsync_plan_model *out, wsync_error *err);
WSYNC_DEF uint64_t wsync_plan_model_tensors(const wsync_plan_model *m);
WSYNC_DEF wsync_result wsync_plan_model_tensor(const wsync_plan_model *m, uint64_t index,
                                               wsync_plan_tensor_info *out, wsync_error *err);
WSYNC_DEF uint64_t wsync_plan_model_params(const wsync_plan_model *m);

/* How a model is trained and served (see wsync_plan_layout_model). */
typedef struct wsync_plan_layout_options {
    wsync_allocator allocator;
    uint32_t n_trainers, n_inference;
    uint32_t replicas;          /* [1] inference replicas of n_inference / replicas ranks */
    uint32_t fp8;               /* 1: projection and expert weights in fp8 e4m3 (block scales) */
    uint32_t shards_only;       /* 1: trainers send only rows they hold (no all-gather) */
    uint32_t one_group;         /* 1: experts in the same mesh group as the rest */
} wsync_plan_layout_options;

/* The planner's input for a model, as vLLM lays it out:
     trainers   every tensor bf16, row-sharded over all trainers; mesh 0
                (group 0) holds the non-expert tensors, mesh 1 (group 1,
                unless one_group) the routed experts;
     inference  per replica of P ranks, tensor parallel: q/k/v, gate/up,
                q_b, kv_b, embed_tokens, lm_head split by rows (output
                dim), o_proj and down_proj by columns (input dim); a split
                is d-way with d the largest divisor of P that divides the
                tensor's units (heads, or 128-row/column blocks in fp8, or
                rows), ranks sharing a slice when d < P (as vLLM replicates
                KV heads); fused qkv_proj (q,k,v), gate_up_proj (gate, up),
                MLA fused_qkv_a_proj (q_a_proj, kv_a_proj_with_mqa,
                replicated); routed experts whole, expert e on rank
                e mod P at slot e / P of the layer's experts.w13_weight
                (gate then up) and experts.w2_weight; norms, router and
                biases replicated; fp8 for projections and experts,
                embeddings, norms and router bf16.
   Each inference rank has region 0 (weights, tensors in model order,
   256-byte aligned) and region 1 (fp8 scales). The arrays belong to out
   (wsync_plan_layout_free). */
typedef struct wsync_plan_layout {
    wsync_plan_input input;
    wsync_allocator allocator;
    uint64_t *region_bytes;     /* per inference rank: region 0, region 1 */
    void *storage_[5];
} wsync_plan_layout;

WSYNC_DEF wsync_result wsync_plan_layout_model(const wsync_plan_model *m, const wsync_plan_layout_options *opt,
                                               wsync_plan_layout *out, wsync_error *err);
WSYNC_DEF void wsync_plan_layout_free(wsync_plan_layout *l);

/* ---- the planner's input from what ranks declare (the controller's) ----

   The controller plans from the ranks' JOINs with this; `wsync plan --demo`
   calls it on push-demo's layouts, so both plan the same input.
     sources  one per tensor name the trainers hold (in order of first
              appearance, trainer 0's entries first), bf16, every column;
     meshes   per source, from its holders' rows: every holder all rows,
              the holders consecutive ranks -> a replica mesh (gather 2) of
              them; rows as torch.chunk over ranks [first, first + count)
              (ranks with no rows may leave the entry out) -> a row-shard
              mesh (gather 0); the mesh group the holders name (equal);
     units    one per distinct inference entry (name, rows, columns, target
              dtype, block), one piece, in order of first appearance; its
              destinations the inference ranks declaring it (rank order),
              region and offset, the scales at scale_offset in the same
              region. Entries of no rows or columns are left out.
   A layout it does not model (a holder with a column slice, another dtype
   or shape, rows that are neither whole nor torch.chunk shards, a tensor
   no trainer holds) fails with WSYNC_ERR_UNSUPPORTED and the tensor named.
   tensors[i], n_tensors[i]: rank i's entries, trainers first (0..T-1),
   then inference ranks. */
typedef struct wsync_ctl_plan_input {
    wsync_plan_input input;
    wsync_allocator allocator;
    uint32_t *holder_entry;     /* per source x trainer (source * T + rank): the trainer's entry
                                   index, or UINT32_MAX */
    uint32_t *dest_entry;       /* per destination: the inference rank's entry index */
    uint32_t *unit_block;       /* per unit: the fp8 tile size of its entries */
    void *storage_;
} wsync_ctl_plan_input;

WSYNC_DEF wsync_result wsync_ctl_plan_input_build(const wsync_ctl_tensor *const *tensors, const uint32_t *n_tensors,
                                                  uint32_t n_trainers, uint32_t n_inference,
                                                  const wsync_allocator *a, wsync_ctl_plan_input *out,
                                                  wsync_error *err);
WSYNC_DEF void wsync_ctl_plan_input_free(wsync_ctl_plan_input *p);

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_H */

/* ======================================================================
   IMPLEMENTATION
   ====================================================================== */
#if defined(WSYNC_RDMA_IMPLEMENTATION) && !defined(WSYNC__RDMA_IMPLEMENTED)
#define WSYNC__RDMA_IMPLEMENTED

#include <errno.h>
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__) && !defined(WSYNC_NO_THREADS) && \
    (defined(__USE_GNU) || (!defined(__GLIBC__) && defined(_GNU_SOURCE)))
#define WSYNC__RDMA_OK 1
#else
#define WSYNC__RDMA_OK 0
#endif

#if WSYNC__RDMA_OK
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#if WSYNC__HAVE_VERBS
#include <dlfcn.h>
#include <infiniband/verbs.h>
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
   IMPLEMENTATION: common to every section  >>common
   ======================================================================
   Errors, little-endian bytes, allocation, bounds; with sockets and
   threads also time, randomness and whole socket reads and writes. */

/* Errors are filled by wsync.h's public wsync_error_set (the implementation
   of wsync.h may live in another translation unit, so not its private
   helpers). */

/* Little-endian bytes, allocation and bounds, for every section (the
   codecs build everywhere, the rest only where WSYNC__RDMA_OK). */
static void wsync__rdma_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static void wsync__rdma_put64(uint8_t *p, uint64_t v)
{
    wsync__rdma_put32(p, (uint32_t)v);
    wsync__rdma_put32(p + 4, (uint32_t)(v >> 32));
}
static uint32_t wsync__rdma_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t wsync__rdma_get64(const uint8_t *p)
{
    return (uint64_t)wsync__rdma_get32(p) | (uint64_t)wsync__rdma_get32(p + 4) << 32;
}

/* The allocator behind a zero wsync_allocator. wsync.h's WSYNC_MALLOC and
   WSYNC_FREE are defined only where its implementation is, often another
   translation unit, so this header has its own pair: the program's
   WSYNC_MALLOC/WSYNC_FREE when it defines them here, else malloc/free. */
#if defined(WSYNC_RDMA_MALLOC) && defined(WSYNC_RDMA_FREE)
#elif !defined(WSYNC_RDMA_MALLOC) && !defined(WSYNC_RDMA_FREE)
#if defined(WSYNC_MALLOC) && defined(WSYNC_FREE)
#define WSYNC_RDMA_MALLOC(sz) WSYNC_MALLOC(sz)
#define WSYNC_RDMA_FREE(p) WSYNC_FREE(p)
#else
#define WSYNC_RDMA_MALLOC(sz) malloc(sz)
#define WSYNC_RDMA_FREE(p) free(p)
#endif
#else
#error "Define both WSYNC_RDMA_MALLOC and WSYNC_RDMA_FREE, or neither."
#endif

static void *wsync__rdma_alloc(const wsync_allocator *a, size_t n)
{
    void *p;
    if (n == 0) n = 1;
    p = a->alloc ? a->alloc(a->user, n) : WSYNC_RDMA_MALLOC(n);
    if (p) memset(p, 0, n);
    return p;
}

static void wsync__rdma_free(const wsync_allocator *a, void *p)
{
    if (!p) return;
    if (a->free) a->free(a->user, p);
    else WSYNC_RDMA_FREE(p);
}

/* 1 when [off, off + len) lies in [0, size). */
static int wsync__rdma_in(uint64_t off, uint64_t len, uint64_t size)
{
    return len <= size && off <= size - len;
}

/* The job key (see wsync_job_key_resolve). */
static wsync_result wsync__rdma_key_set(wsync_job_key *out, const void *key, size_t len, const char *from,
                                        wsync_error *err)
{
    if (len < WSYNC_JOB_KEY_MIN || len > WSYNC_JOB_KEY_MAX)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "job key from %s: %zu bytes (a key has %u to %u bytes: e.g. 32 random bytes in hex)",
                                from, len, WSYNC_JOB_KEY_MIN, WSYNC_JOB_KEY_MAX);
    memcpy(out->bytes, key, len);
    out->len = (uint32_t)len;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_job_key_resolve(const void *key, size_t len, wsync_job_key *out, wsync_error *err)
{
    const char *env, *path;
    wsync_error local;
    if (!err) err = &local;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "job key: out is NULL");
    memset(out, 0, sizeof *out);
    if (key && len) return wsync__rdma_key_set(out, key, len, "the options", err);
    if ((env = getenv("WSYNC_JOB_KEY")) != NULL && env[0])
        return wsync__rdma_key_set(out, env, strlen(env), "WSYNC_JOB_KEY", err);
    if ((path = getenv("WSYNC_JOB_KEY_FILE")) != NULL && path[0]) {
        uint8_t buf[WSYNC_JOB_KEY_MAX + 3];
        size_t n;
        int bad;
        FILE *f = fopen(path, "rb");
        char from[300];
        snprintf(from, sizeof from, "WSYNC_JOB_KEY_FILE '%.250s'", path);
        if (!f) return wsync_error_set(err, WSYNC_ERR_IO, "job key from %s: %s", from, strerror(errno));
        n = fread(buf, 1, sizeof buf, f);
        bad = ferror(f);
        fclose(f);
        if (bad) return wsync_error_set(err, WSYNC_ERR_IO, "job key from %s: read error", from);
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
        if (n > WSYNC_JOB_KEY_MAX) n = WSYNC_JOB_KEY_MAX + 1; /* too long: said so */
        return wsync__rdma_key_set(out, buf, n, from, err);
    }
    return WSYNC_OK;
}

/* HMAC-SHA256 under the job key of label (with its NUL) then msg: each use
   of the key has a label of its own, so no answer serves another use. */
static void wsync__rdma_key_mac(const wsync_job_key *k, const char *label, const void *msg, size_t len,
                                uint8_t out[32])
{
    wsync_hmac_sha256_state s;
    wsync_hmac_sha256_init(&s, k->bytes, k->len);
    wsync_hmac_sha256_update(&s, label, strlen(label) + 1);
    wsync_hmac_sha256_update(&s, msg, len);
    wsync_hmac_sha256_final(&s, out);
}

#if WSYNC__RDMA_OK

static int64_t wsync__rdma_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t wsync__rdma_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Keys need to be unguessable by other processes, not cryptographic. */
static uint64_t wsync__rdma_random64(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    struct timespec ts;
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
        close(fd);
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    return v ^ wsync__rdma_mix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 20) ^
                               (uint64_t)(uintptr_t)&v);
}


/* Reads exactly len bytes. idle: the wait for the first byte is unbounded
   (between frames); once a byte arrived, each wait is at most timeout_ms,
   and with a deadline (wsync__rdma_now_ms's clock; 0: none) the whole read
   ends by then, however the bytes trickle in. 1 done, 0 clean end of
   stream before the first byte, -1 error or timeout (errno ETIMEDOUT). */
static int wsync__rdma_recv_by(int fd, void *buf, size_t len, int timeout_ms, int idle, int64_t deadline)
{
    uint8_t *p = (uint8_t *)buf;
    size_t got = 0;
    while (got < len) {
        struct pollfd pf;
        ssize_t n;
        int pr, wait = idle && got == 0 ? -1 : timeout_ms;
        if (deadline) {
            int64_t left = deadline - wsync__rdma_now_ms();
            if (left <= 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            if (wait < 0 || left < wait) wait = (int)left;
        }
        pf.fd = fd;
        pf.events = POLLIN;
        pf.revents = 0;
        pr = poll(&pf, 1, wait);
        if (pr < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (pr == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        n = recv(fd, p + got, len - got, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return -1;
        }
        if (n == 0) {
            if (got == 0) return 0;
            errno = ECONNRESET;
            return -1;
        }
        got += (size_t)n;
    }
    return 1;
}

static int wsync__rdma_recv_full(int fd, void *buf, size_t len, int timeout_ms, int idle)
{
    return wsync__rdma_recv_by(fd, buf, len, timeout_ms, idle, 0);
}

/* Sends exactly len bytes (SO_SNDTIMEO bounds a stall: EAGAIN). */
static int wsync__rdma_send_all(int fd, const void *buf, size_t len, int more)
{
    const uint8_t *p = (const uint8_t *)buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) errno = ETIMEDOUT;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void wsync__rdma_set_timeouts(int fd, unsigned ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* Socket buffers above the system's caps (net.core.[rw]mem_max) need
   CAP_NET_ADMIN; without it the kernel's autotuning (which a plain
   SO_SNDBUF would switch off, capped lower) is left alone. */
static void wsync__rdma_big_buffers(int fd, unsigned size)
{
    int v = (int)size;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof v);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof v);
}

/* 1 when the peer closed (or reset) a connection it never writes on. */
static int wsync__rdma_peer_gone(int fd)
{
    struct pollfd pf;
    pf.fd = fd;
    pf.events = POLLIN;
    pf.revents = 0;
    return poll(&pf, 1, 0) != 0;
}

#else /* !WSYNC__RDMA_OK */

static wsync_result wsync__rdma_no(wsync_error *err, const char *what)
{
    wsync_error_set(err, WSYNC_OK, NULL);
#if defined(__linux__) && !defined(WSYNC_NO_THREADS)
    return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                            "%s: built without GNU declarations: define _GNU_SOURCE (or WSYNC_RDMA_IMPLEMENTATION) "
                            "before the first #include of the implementation file", what);
#else
    return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "%s: needs Linux and POSIX threads", what);
#endif
}

#endif /* WSYNC__RDMA_OK */

/* ======================================================================
   IMPLEMENTATION: the fabrics (TCP, one host, ibverbs)
   ====================================================================== */

#if WSYNC__RDMA_OK

/* ---------------------------------------------------------------------
   The fabrics' shared part: the wire, regions, immediates, the receiver
   thread  >>receiver
   --------------------------------------------------------------------- */

#define WSYNC__TCP_MAGIC 0x32465357u   /* "WSF2" */
#define WSYNC__ACK_MAGIC 0x32415357u   /* "WSA2" */
#define WSYNC__TH_HELLO 0x33485357u    /* "WSH3": the TCP handshake (TCP AUTHENTICATION) */
#define WSYNC__TH_CHAL 0x34485357u     /* "WSH4" */
#define WSYNC__TH_PROOF 0x35485357u    /* "WSH5" */
#define WSYNC__TH_DONE 0x36485357u     /* "WSH6" */
#define WSYNC__TH_HELLO_LEN 56
#define WSYNC__TH_CHAL_LEN 72
#define WSYNC__TH_PROOF_LEN 40
#define WSYNC__TH_DONE_LEN 16
#define WSYNC__TAG 16                  /* a frame's or an ack's tag */
#define WSYNC__JOB_KEY_MAX 1024
#define WSYNC__HELLO_MAGIC 0x31485357u /* "WSH1" */
#define WSYNC__REPLY_MAGIC 0x32485357u /* "WSH2" */
#define WSYNC__IMM_MAGIC 0x31495357u   /* "WSI1" */
#define WSYNC__TCP_HDR 64
#define WSYNC__ACK_LEN 32
#define WSYNC__HELLO_LEN 24
#define WSYNC__REPLY_LEN 40
#define WSYNC__IMM_LEN 16
#define WSYNC__IMM_QUEUE_MAX (1u << 24)
#define WSYNC__HOST_NAME_MAX 100

enum {
    WSYNC__FR_WRITE = 1,
    WSYNC__FR_IMM = 2,
    WSYNC__FR_FLUSH = 3
};

/* Why the receiver refused a frame (the ack's status). */
enum {
    WSYNC__REJ_MAGIC = 1,
    WSYNC__REJ_REGION = 2,
    WSYNC__REJ_KEY = 3,
    WSYNC__REJ_BOUNDS = 4,
    WSYNC__REJ_QUEUE = 5,
    WSYNC__REJ_FLUSH = 6,
    WSYNC__REJ_PEER = 7,
    WSYNC__REJ_AUTH = 8,
    WSYNC__REJ_SEQ = 9,
    WSYNC__REJ_MAC = 10,
    WSYNC__REJ_WINDOW = 11,
    WSYNC__REJ_BUSY = 12
};

static const char *wsync__fab_rej_str(uint32_t s)
{
    switch (s) {
    case WSYNC__REJ_MAGIC: return "bad magic or frame type";
    case WSYNC__REJ_REGION: return "unknown region (never registered, or deregistered)";
    case WSYNC__REJ_KEY: return "wrong key";
    case WSYNC__REJ_BOUNDS: return "offset and length outside the region";
    case WSYNC__REJ_QUEUE: return "immediate queue full (nobody calls recv_imm)";
    case WSYNC__REJ_FLUSH: return "malformed flush frame";
    case WSYNC__REJ_PEER: return "the peer runs as another user (one-host fabric: same uid or root only)";
    case WSYNC__REJ_AUTH: return "authentication failed (no job key, another job's key, or another region's)";
    case WSYNC__REJ_SEQ: return "frame out of sequence (replayed or dropped)";
    case WSYNC__REJ_MAC: return "frame tag mismatch (forged or altered on the way)";
    case WSYNC__REJ_WINDOW: return "write outside the write window (no step open, or a sender the plan does not name)";
    case WSYNC__REJ_BUSY: return "too many connections";
    default: return "unknown reason";
    }
}

/* Poly1305 (RFC 8439, section 2.5; after poly1305-donna's 64-bit code): the
   TCP fabric's tag over a frame's bytes, under a one-time key per frame
   (TCP AUTHENTICATION). 44 + 44 + 42-bit limbs, 64 x 64 -> 128-bit
   products: unsigned __int128 where the compiler has it, else four 32-bit
   products. */
typedef struct wsync__poly {
    uint64_t r[3], h[3], pad[2];
    uint8_t buf[16];
    size_t nbuf;
} wsync__poly;

#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 wsync__u128n;
#endif
typedef struct wsync__u128 {
    uint64_t lo, hi;
} wsync__u128;

static wsync__u128 wsync__poly_mul(uint64_t a, uint64_t b)
{
    wsync__u128 r;
#if defined(__SIZEOF_INT128__)
    wsync__u128n p = (wsync__u128n)a * b;
    r.lo = (uint64_t)p;
    r.hi = (uint64_t)(p >> 64);
#else
    uint64_t a0 = a & 0xFFFFFFFFu, a1 = a >> 32, b0 = b & 0xFFFFFFFFu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xFFFFFFFFu) + (p10 & 0xFFFFFFFFu);
    r.lo = (p00 & 0xFFFFFFFFu) | mid << 32;
    r.hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
    return r;
}

static void wsync__poly_add(wsync__u128 *a, wsync__u128 b)
{
    a->lo += b.lo;
    a->hi += b.hi + (a->lo < b.lo);
}

static void wsync__poly_init(wsync__poly *p, const uint8_t key[32])
{
    uint64_t t0 = wsync__rdma_get64(key), t1 = wsync__rdma_get64(key + 8);
    p->r[0] = t0 & 0xffc0fffffffull;
    p->r[1] = ((t0 >> 44) | (t1 << 20)) & 0xfffffc0ffffull;
    p->r[2] = (t1 >> 24) & 0x00ffffffc0full;
    p->h[0] = p->h[1] = p->h[2] = 0;
    p->pad[0] = wsync__rdma_get64(key + 16);
    p->pad[1] = wsync__rdma_get64(key + 24);
    p->nbuf = 0;
}

/* hibit: 1 << 40 (2^128 in the top limb) for a whole block, 0 for the padded last one. */
static void wsync__poly_blocks(wsync__poly *p, const uint8_t *m, size_t n, uint64_t hibit)
{
    uint64_t r0 = p->r[0], r1 = p->r[1], r2 = p->r[2], h0 = p->h[0], h1 = p->h[1], h2 = p->h[2];
    uint64_t s1 = r1 * (5 << 2), s2 = r2 * (5 << 2), c;
    while (n >= 16) {
        wsync__u128 d0, d1, d2;
        uint64_t t0 = wsync__rdma_get64(m), t1 = wsync__rdma_get64(m + 8);
        h0 += t0 & 0xfffffffffffull;
        h1 += ((t0 >> 44) | (t1 << 20)) & 0xfffffffffffull;
        h2 += ((t1 >> 24) & 0x3ffffffffffull) | hibit;
        d0 = wsync__poly_mul(h0, r0);
        wsync__poly_add(&d0, wsync__poly_mul(h1, s2));
        wsync__poly_add(&d0, wsync__poly_mul(h2, s1));
        d1 = wsync__poly_mul(h0, r1);
        wsync__poly_add(&d1, wsync__poly_mul(h1, r0));
        wsync__poly_add(&d1, wsync__poly_mul(h2, s2));
        d2 = wsync__poly_mul(h0, r2);
        wsync__poly_add(&d2, wsync__poly_mul(h1, r1));
        wsync__poly_add(&d2, wsync__poly_mul(h2, r0));
        c = (d0.lo >> 44) | (d0.hi << 20);
        h0 = d0.lo & 0xfffffffffffull;
        d1.lo += c;
        d1.hi += d1.lo < c;
        c = (d1.lo >> 44) | (d1.hi << 20);
        h1 = d1.lo & 0xfffffffffffull;
        d2.lo += c;
        d2.hi += d2.lo < c;
        c = (d2.lo >> 42) | (d2.hi << 22);
        h2 = d2.lo & 0x3ffffffffffull;
        h0 += c * 5;
        c = h0 >> 44;
        h0 &= 0xfffffffffffull;
        h1 += c;
        m += 16;
        n -= 16;
    }
    p->h[0] = h0;
    p->h[1] = h1;
    p->h[2] = h2;
}

static void wsync__poly_update(wsync__poly *p, const uint8_t *m, size_t n)
{
    if (p->nbuf) {
        size_t k = 16 - p->nbuf < n ? 16 - p->nbuf : n;
        memcpy(p->buf + p->nbuf, m, k);
        p->nbuf += k;
        m += k;
        n -= k;
        if (p->nbuf < 16) return;
        wsync__poly_blocks(p, p->buf, 16, 1ull << 40);
        p->nbuf = 0;
    }
    if (n >= 16) {
        size_t whole = n & ~(size_t)15;
        wsync__poly_blocks(p, m, whole, 1ull << 40);
        m += whole;
        n -= whole;
    }
    memcpy(p->buf, m, n);
    p->nbuf = n;
}

static void wsync__poly_final(wsync__poly *p, uint8_t tag[16])
{
    uint64_t h0, h1, h2, g0, g1, g2, c, t0, t1;
    int pass;
    if (p->nbuf) {
        size_t i = p->nbuf;
        p->buf[i++] = 1;
        while (i < 16) p->buf[i++] = 0;
        wsync__poly_blocks(p, p->buf, 16, 0);
    }
    h0 = p->h[0];
    h1 = p->h[1];
    h2 = p->h[2];
    for (pass = 0; pass < 2; pass++) { /* a full carry, twice: the second carries what the first left in h1 */
        c = h1 >> 44;
        h1 &= 0xfffffffffffull;
        h2 += c;
        c = h2 >> 42;
        h2 &= 0x3ffffffffffull;
        h0 += c * 5;
        c = h0 >> 44;
        h0 &= 0xfffffffffffull;
        h1 += c;
    }
    /* h + -p, kept when h >= p */
    g0 = h0 + 5;
    c = g0 >> 44;
    g0 &= 0xfffffffffffull;
    g1 = h1 + c;
    c = g1 >> 44;
    g1 &= 0xfffffffffffull;
    g2 = h2 + c - (1ull << 42);
    c = (g2 >> 63) - 1;
    g0 &= c;
    g1 &= c;
    g2 &= c;
    c = ~c;
    h0 = (h0 & c) | g0;
    h1 = (h1 & c) | g1;
    h2 = (h2 & c) | g2;
    t0 = p->pad[0];
    t1 = p->pad[1];
    h0 += t0 & 0xfffffffffffull;
    c = h0 >> 44;
    h0 &= 0xfffffffffffull;
    h1 += (((t0 >> 44) | (t1 << 20)) & 0xfffffffffffull) + c;
    c = h1 >> 44;
    h1 &= 0xfffffffffffull;
    h2 += ((t1 >> 24) & 0x3ffffffffffull) + c;
    h2 &= 0x3ffffffffffull;
    wsync__rdma_put64(tag, h0 | h1 << 44);
    wsync__rdma_put64(tag + 8, (h1 >> 20) | h2 << 24);
}

struct wsync_fabric_mr {
    struct wsync_fabric_mr *next;
    uint32_t backend, id;
    uint64_t key;
    uint8_t *addr;
    uint64_t len;
    unsigned refs;             /* receiver connections writing into it now */
    int linked;                /* in the fabric's list (peers may write) */
    uint32_t *q;               /* immediates: a ring */
    size_t q_cap, q_head, q_n;
    int shm_fd;                /* one-host SHM: the allocation's fd (borrowed), or -1 */
    uint64_t shm_off, shm_size;
    void *ext;                 /* verbs: the ibv_mr of each NIC */
};

struct wsync_fabric_remote {
    struct wsync_fabric_remote *next;
    uint32_t backend;
    int fd;
    uint32_t region;
    uint64_t key, addr, len;
    uint64_t seq, pending;     /* TCP: flushes sent, writes since the last flush */
    int broken;
    char why[400];
    char peer[96];
    int pid;                   /* one-host */
    int mode;
    wsync_hmac_sha256_state mac; /* TCP: keyed by the connection's key (from the handshake) */
    uint64_t fseq;             /* TCP: frames sent on the connection */
    uint8_t *map;              /* SHM: the mapping, and where the region starts in it */
    size_t map_len, map_delta;
    void *ext;                 /* verbs: the queue pairs, one per NIC lane */
};

typedef struct wsync__fab_conn {
    struct wsync__fab_conn *next;
    struct wsync__fab_base *base;
    int fd, done;
    pthread_t th;
    struct wsync_fabric_mr *busy;  /* TCP: being written; one-host: bound by the handshake */
    int pending;               /* in its handshake: holds one of max_pending slots */
    int authed;                /* past its handshake: holds one of max_conns slots */
    int said_hello;            /* its HELLO came (set under the base's mu) */
    uint64_t order;            /* accept order (wsync__fab_victim) */
    int evicted;               /* closed for a newer one: counted and logged by the acceptor */
    uint64_t host;             /* a hash of its address, the port left out */
    int64_t deadline;          /* the handshake ends by then (wsync__rdma_now_ms's clock) */
    uint32_t sender;           /* the id it authenticated with */
    char peer[72];             /* its address, for the log */
} wsync__fab_conn;

/* What both backends share: the receiver side and the list of remotes. */
typedef struct wsync__fab_base {
    uint32_t backend;
    wsync_allocator a;
    pthread_mutex_t mu;
    pthread_cond_t imm_cv, ref_cv;
    struct wsync_fabric_mr *regions, *sources;
    struct wsync_fabric_remote *remotes;
    uint32_t next_id;
    unsigned timeout_ms, max_conns;
    int send_only;
    wsync_fabric_stats stats;
    /* the receiver thread */
    int lfd, wake[2], started, stop;
    pthread_t th;
    wsync__fab_conn *conns;
    unsigned n_conns;
    void (*serve)(struct wsync__fab_base *b, wsync__fab_conn *c);
    /* who may write: the job key, this process's id; the write window */
    uint8_t *job_key;
    size_t job_key_len;
    uint32_t self_id;
    unsigned auth_timeout_ms, max_pending, n_pending, n_authed;
    uint64_t n_accepted;
    int windowed, win_open;
    uint64_t win_step;
    uint32_t *win_ids;         /* sorted */
    size_t win_n;
    void (*log)(void *user, const char *line);
    void *log_user;
    int data_tag;              /* TCP: WSYNC__TAG_POLY; the others only for bench_fabric's comparison */
} wsync__fab_base;

/* A TCP frame's data tag: Poly1305 always, except in bench_fabric, which
   compares it with none and with HMAC-SHA256 (both sides set alike). */
enum {
    WSYNC__TAG_POLY = 0,
    WSYNC__TAG_NONE = 1,
    WSYNC__TAG_HMAC = 2
};

/* The data tag of one frame, computed a piece at a time. */
typedef struct wsync__dtag {
    int kind;
    wsync__poly poly;
    wsync_hmac_sha256_state hmac;
} wsync__dtag;

static void wsync__dtag_init(wsync__dtag *t, int kind, const uint8_t dkey[32])
{
    t->kind = kind;
    if (kind == WSYNC__TAG_POLY) wsync__poly_init(&t->poly, dkey);
    else if (kind == WSYNC__TAG_HMAC) wsync_hmac_sha256_init(&t->hmac, dkey, 32);
}

static void wsync__dtag_update(wsync__dtag *t, const uint8_t *p, size_t n)
{
    if (t->kind == WSYNC__TAG_POLY) wsync__poly_update(&t->poly, p, n);
    else if (t->kind == WSYNC__TAG_HMAC) wsync_hmac_sha256_update(&t->hmac, p, n);
}

static void wsync__dtag_final(wsync__dtag *t, uint8_t tag[16])
{
    uint8_t full[32];
    memset(tag, 0, 16);
    if (t->kind == WSYNC__TAG_POLY) {
        wsync__poly_final(&t->poly, tag);
    } else if (t->kind == WSYNC__TAG_HMAC) {
        wsync_hmac_sha256_final(&t->hmac, full);
        memcpy(tag, full, 16);
    }
}

static wsync_result wsync__fab_base_init(wsync__fab_base *b, uint32_t backend, const wsync_allocator *a,
                                         wsync_error *err)
{
    b->backend = backend;
    if (a) b->a = *a;
    b->lfd = -1;
    b->wake[0] = b->wake[1] = -1;
    b->next_id = 1;
    b->auth_timeout_ms = 1000;
    b->max_pending = 32;
    if (pthread_mutex_init(&b->mu, NULL) != 0) return wsync_error_set(err, WSYNC_ERR_IO, "%s", "pthread_mutex_init");
    if (pthread_cond_init(&b->imm_cv, NULL) != 0) {
        pthread_mutex_destroy(&b->mu);
        return wsync_error_set(err, WSYNC_ERR_IO, "%s", "pthread_cond_init");
    }
    if (pthread_cond_init(&b->ref_cv, NULL) != 0) {
        pthread_cond_destroy(&b->imm_cv);
        pthread_mutex_destroy(&b->mu);
        return wsync_error_set(err, WSYNC_ERR_IO, "%s", "pthread_cond_init");
    }
    return WSYNC_OK;
}

/* Counts a refusal and logs it: stats.last_reject, and the log hook
   (called outside the lock). c: the connection refused, or NULL; one the
   acceptor closed for a newer one (evicted) was counted then, and its
   thread's refusal (the hang-up it sees) is not counted again; the
   others leave their pending slot here, under the same lock, so the
   acceptor cannot then evict them and count them twice. */
static void wsync__fab_note(wsync__fab_base *b, wsync__fab_conn *c, char *line)
{
    void (*log)(void *, const char *);
    void *lu;
    size_t k;
    wsync_error_clean(line); /* peers' words: no escape sequences */
    k = strlen(line); /* cut to the stats' room: the start is what matters */
    if (k >= sizeof b->stats.last_reject) k = sizeof b->stats.last_reject - 1;
    pthread_mutex_lock(&b->mu);
    if (c && c->evicted) {
        pthread_mutex_unlock(&b->mu);
        return;
    }
    if (c && c->pending) {
        c->pending = 0;
        b->n_pending--;
    }
    b->stats.rejected++;
    memcpy(b->stats.last_reject, line, k);
    b->stats.last_reject[k] = 0;
    log = b->log;
    lu = b->log_user;
    pthread_mutex_unlock(&b->mu);
    if (log) log(lu, line);
}

/* The same, the line starting with the peer's address. */
static void wsync__fab_refuse(wsync__fab_base *b, wsync__fab_conn *c, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void wsync__fab_refuse(wsync__fab_base *b, wsync__fab_conn *c, const char *fmt, ...)
{
    char msg[200], line[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "%s: %s", c && c->peer[0] ? c->peer : "a peer", msg);
    wsync__fab_note(b, c, line);
}

/* A connection proved who it is: it leaves its pre-authentication slot
   for one of max_conns. -1 when those are all taken. */
static int wsync__fab_authed(wsync__fab_base *b, wsync__fab_conn *c, uint32_t sender)
{
    int r = 0;
    pthread_mutex_lock(&b->mu);
    if (c->pending) {
        c->pending = 0;
        b->n_pending--;
    }
    if (b->n_authed >= b->max_conns) {
        r = -1;
    } else {
        c->authed = 1;
        c->sender = sender;
        b->n_authed++;
    }
    pthread_mutex_unlock(&b->mu);
    return r;
}

/* Under b->mu: 1 when the window lets sender write now. */
static int wsync__fab_window_ok(const wsync__fab_base *b, uint32_t sender)
{
    size_t lo = 0, hi = b->win_n;
    if (!b->windowed) return 1;
    if (!b->win_open) return 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->win_ids[mid] == sender) return 1;
        if (b->win_ids[mid] < sender) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

/* Under b->mu. */
static struct wsync_fabric_mr *wsync__fab_find(wsync__fab_base *b, uint32_t id)
{
    struct wsync_fabric_mr *m;
    for (m = b->regions; m; m = m->next)
        if (m->id == id) return m;
    return NULL;
}

/* Under b->mu: 0, or a WSYNC__REJ_ reason. */
static int wsync__fab_imm_push(wsync__fab_base *b, struct wsync_fabric_mr *m, uint32_t imm)
{
    if (m->q_n == m->q_cap) {
        size_t cap = m->q_cap ? m->q_cap * 2 : 1024, i;
        uint32_t *q;
        if (cap > WSYNC__IMM_QUEUE_MAX) return WSYNC__REJ_QUEUE;
        q = (uint32_t *)wsync__rdma_alloc(&b->a, cap * sizeof *q);
        if (!q) return WSYNC__REJ_QUEUE;
        for (i = 0; i < m->q_n; i++) q[i] = m->q[(m->q_head + i) % m->q_cap];
        wsync__rdma_free(&b->a, m->q);
        m->q = q;
        m->q_cap = cap;
        m->q_head = 0;
    }
    m->q[(m->q_head + m->q_n) % m->q_cap] = imm;
    m->q_n++;
    b->stats.imms++;
    pthread_cond_broadcast(&b->imm_cv);
    return 0;
}

static wsync_result wsync__fab_recv_imm(void *user, wsync_fabric_mr *mr, uint32_t *imm, int timeout_ms,
                                        wsync_error *err)
{
    wsync__fab_base *b = (wsync__fab_base *)user;
    struct timespec until;
    wsync_result r = WSYNC_OK;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!b || !mr || !imm) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "recv_imm arguments");
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->mu);
    while (mr->q_n == 0) {
        if (timeout_ms == 0) break;
        if (timeout_ms < 0) pthread_cond_wait(&b->imm_cv, &b->mu);
        else if (pthread_cond_timedwait(&b->imm_cv, &b->mu, &until) == ETIMEDOUT) break;
    }
    if (mr->q_n) {
        *imm = mr->q[mr->q_head];
        mr->q_head = (mr->q_head + 1) % mr->q_cap;
        mr->q_n--;
    } else {
        r = WSYNC_ERR_LIMIT;
    }
    pthread_mutex_unlock(&b->mu);
    if (r != WSYNC_OK)
        return wsync_error_set(err, r, "no immediate on region %u within %d ms", (unsigned)mr->id, timeout_ms);
    return WSYNC_OK;
}

static void *wsync__fab_conn_main(void *p)
{
    wsync__fab_conn *c = (wsync__fab_conn *)p;
    wsync__fab_base *b = c->base;
    b->serve(b, c);
    pthread_mutex_lock(&b->mu);
    c->done = 1;
    c->busy = NULL;
    if (c->pending) b->n_pending--;
    if (c->authed) b->n_authed--;
    c->pending = c->authed = 0;
    pthread_mutex_unlock(&b->mu);
    if (write(b->wake[1], "r", 1) < 0) { /* the acceptor reaps at its next wake-up anyway */
    }
    return NULL;
}

/* Joins and frees the connections whose thread ended (all of them at stop). */
static void wsync__fab_reap(wsync__fab_base *b, int all)
{
    wsync__fab_conn *dead = NULL, **pp, *c;
    pthread_mutex_lock(&b->mu);
    pp = &b->conns;
    while ((c = *pp) != NULL) {
        if (all || c->done) {
            *pp = c->next;
            c->next = dead;
            dead = c;
            b->n_conns--;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&b->mu);
    while (dead) {
        c = dead;
        dead = c->next;
        pthread_join(c->th, NULL);
        close(c->fd);
        wsync__rdma_free(&b->a, c);
    }
}

/* "192.0.2.1:40312", "[2001:db8::1]:40312", or a Unix peer's pid and uid. */
static void wsync__fab_peer_name(int fd, const struct sockaddr_storage *ss, socklen_t sl, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN + 1] = "?";
    if (ss->ss_family == AF_INET && sl >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        snprintf(out, cap, "%s:%u", host, (unsigned)ntohs(a->sin_port));
    } else if (ss->ss_family == AF_INET6 && sl >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        snprintf(out, cap, "[%s]:%u", host, (unsigned)ntohs(a->sin6_port));
    } else {
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
            snprintf(out, cap, "pid %ld uid %lu", (long)cred.pid, (unsigned long)cred.uid);
        else
            snprintf(out, cap, "%s", "a local peer");
    }
}

/* Under b->mu: the pending connection a new one closes when all
   max_pending are taken: one from the host with the most pending
   connections (a flood from one host does not cut a sender on another),
   then one whose HELLO has not come before one whose has, then the
   oldest. */
static wsync__fab_conn *wsync__fab_victim(wsync__fab_base *b)
{
    wsync__fab_conn *best = NULL, *it, *jt;
    unsigned best_n = 0;
    for (it = b->conns; it; it = it->next) {
        unsigned n = 0;
        if (!it->pending) continue;
        for (jt = b->conns; jt; jt = jt->next) n += jt->pending && jt->host == it->host;
        if (!best || n > best_n ||
            (n == best_n && (it->said_hello < best->said_hello ||
                             (it->said_hello == best->said_hello && it->order < best->order)))) {
            best = it;
            best_n = n;
        }
    }
    return best;
}

static void *wsync__fab_srv_main(void *p)
{
    wsync__fab_base *b = (wsync__fab_base *)p;
    for (;;) {
        struct pollfd pf[2];
        int stop, fd;
        wsync__fab_conn *c, *old;
        char drain[64], evicted[160];
        struct sockaddr_storage ss;
        socklen_t sl;
        pf[0].fd = b->lfd;
        pf[0].events = POLLIN;
        pf[0].revents = 0;
        pf[1].fd = b->wake[0];
        pf[1].events = POLLIN;
        pf[1].revents = 0;
        if (poll(pf, 2, -1) < 0 && errno != EINTR) break;
        if (pf[1].revents)
            while (read(b->wake[0], drain, sizeof drain) > 0) {
            }
        pthread_mutex_lock(&b->mu);
        stop = b->stop;
        pthread_mutex_unlock(&b->mu);
        if (stop) break;
        wsync__fab_reap(b, 0);
        if (!(pf[0].revents & POLLIN)) continue;
        sl = sizeof ss;
        fd = accept4(b->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS)
                poll(NULL, 0, 10); /* out of descriptors: do not spin on the pending connection */
            continue;
        }
        c = (wsync__fab_conn *)wsync__rdma_alloc(&b->a, sizeof *c);
        if (!c) {
            char line[64] = "out of memory for a connection";
            wsync__fab_note(b, NULL, line);
            close(fd);
            continue;
        }
        wsync__fab_peer_name(fd, &ss, sl, c->peer, sizeof c->peer);
        {
            const char *colon = strrchr(c->peer, ':');
            c->host = wsync_digest(c->peer, colon ? (size_t)(colon - c->peer) : strlen(c->peer));
        }
        evicted[0] = 0;
        pthread_mutex_lock(&b->mu);
        /* Connections that have not proved the key yet share max_pending
           slots; a new one closes one of them (wsync__fab_victim: one from
           the busiest host, a silent one first, else the oldest), so idle
           connections cannot keep a real sender out (its handshake takes
           one round trip), and the authenticated ones never compete for
           these. */
        if (b->n_pending >= b->max_pending) {
            old = wsync__fab_victim(b);
            if (old) {
                old->pending = 0;
                old->evicted = 1; /* counted once, here (wsync__fab_note) */
                b->n_pending--;
                shutdown(old->fd, SHUT_RDWR);
                snprintf(evicted, sizeof evicted, "%s: closed before authenticating (%u connections in their "
                         "handshake; a newer one came)", old->peer, b->max_pending);
            }
        }
        c->pending = 1;
        b->n_pending++;
        c->order = ++b->n_accepted;
        c->deadline = wsync__rdma_now_ms() + b->auth_timeout_ms;
        c->fd = fd;
        c->base = b;
        c->next = b->conns;
        b->conns = c;
        b->n_conns++;
        b->stats.connections++;
        if (pthread_create(&c->th, NULL, wsync__fab_conn_main, c) != 0) {
            b->conns = c->next;
            b->n_conns--;
            b->n_pending--;
            pthread_mutex_unlock(&b->mu);
            close(fd);
            wsync__rdma_free(&b->a, c);
            continue;
        }
        pthread_mutex_unlock(&b->mu);
        if (evicted[0]) wsync__fab_note(b, NULL, evicted);
    }
    return NULL;
}

/* Starts the receiver thread on a bound, listening socket (taken over). */
static wsync_result wsync__fab_srv_start(wsync__fab_base *b, int lfd, wsync_error *err)
{
    if (pipe2(b->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        close(lfd);
        return wsync_error_set(err, WSYNC_ERR_IO, "pipe2: %s", strerror(errno));
    }
    b->lfd = lfd;
    if (pthread_create(&b->th, NULL, wsync__fab_srv_main, b) != 0) {
        close(b->wake[0]);
        close(b->wake[1]);
        close(lfd);
        b->lfd = b->wake[0] = b->wake[1] = -1;
        return wsync_error_set(err, WSYNC_ERR_IO, "%s", "cannot start the receiver thread");
    }
    b->started = 1;
    return WSYNC_OK;
}

static void wsync__fab_srv_stop(wsync__fab_base *b)
{
    wsync__fab_conn *c;
    if (!b->started) return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_mutex_unlock(&b->mu);
    if (write(b->wake[1], "s", 1) < 0) { /* the pipe is full: a wake-up is pending already */
    }
    pthread_join(b->th, NULL);
    pthread_mutex_lock(&b->mu);
    for (c = b->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&b->mu);
    wsync__fab_reap(b, 1);
    close(b->lfd);
    close(b->wake[0]);
    close(b->wake[1]);
    b->lfd = b->wake[0] = b->wake[1] = -1;
    b->started = 0;
}

/* Unlinks a region so no peer reaches it any more, cuts the connections
   using it, waits for writes into it to end, and frees it. */
static void wsync__fab_unlink(wsync__fab_base *b, struct wsync_fabric_mr *m)
{
    struct wsync_fabric_mr **pp;
    wsync__fab_conn *c;
    pthread_mutex_lock(&b->mu);
    for (pp = m->linked ? &b->regions : &b->sources; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    m->linked = 0;
    for (c = b->conns; c; c = c->next)
        if (c->busy == m) {
            shutdown(c->fd, SHUT_RDWR);
            c->busy = NULL; /* a one-host connection bound to m queues nothing more */
        }
    while (m->refs) pthread_cond_wait(&b->ref_cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

static void wsync__fab_dereg(void *user, wsync_fabric_mr *m)
{
    wsync__fab_base *b = (wsync__fab_base *)user;
    if (!b || !m) return;
    wsync__fab_unlink(b, m);
    wsync__rdma_free(&b->a, m->q);
    wsync__rdma_free(&b->a, m);
}

/* Registers a region: linked (peers may write) when the receiver runs. */
static wsync_result wsync__fab_reg_common(wsync__fab_base *b, void *addr, uint64_t len, wsync_mem_kind kind,
                                          struct wsync_fabric_mr **out, wsync_error *err)
{
    struct wsync_fabric_mr *m;
    uint64_t end;
    if (!b || !out || (!addr && len)) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "reg arguments");
    *out = NULL;
    if (kind != WSYNC_MEM_HOST)
        return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "%s", "only host memory can be registered (no dmabuf yet)");
    if (len == 0) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "an empty region");
    if (!wsync_add_u64((uint64_t)(uintptr_t)addr, len, &end) || len > (uint64_t)(SIZE_MAX / 2))
        return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "%s", "region address + length overflows");
    m = (struct wsync_fabric_mr *)wsync__rdma_alloc(&b->a, sizeof *m);
    if (!m) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "reg");
    m->backend = b->backend;
    m->addr = (uint8_t *)addr;
    m->len = len;
    m->key = wsync__rdma_random64();
    m->shm_fd = -1;
    *out = m;
    return WSYNC_OK;
}

static void wsync__fab_link(wsync__fab_base *b, struct wsync_fabric_mr *m)
{
    pthread_mutex_lock(&b->mu);
    m->id = b->next_id++;
    if (b->next_id == 0) b->next_id = 1;
    if (b->started) {
        m->linked = 1;
        m->next = b->regions;
        b->regions = m;
    } else {
        m->next = b->sources;
        b->sources = m;
    }
    pthread_mutex_unlock(&b->mu);
}

static void wsync__fab_close_remote(void *user, wsync_fabric_remote *r)
{
    wsync__fab_base *b = (wsync__fab_base *)user;
    struct wsync_fabric_remote **pp;
    if (!b || !r) return;
    for (pp = &b->remotes; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    if (r->fd >= 0) close(r->fd);
    if (r->map) munmap(r->map, r->map_len);
    wsync__rdma_free(&b->a, r);
}

/* Everything a fabric holds; the backend frees its own state after. */
static void wsync__fab_base_close(wsync__fab_base *b)
{
    wsync__fab_srv_stop(b);
    while (b->remotes) wsync__fab_close_remote(b, b->remotes);
    while (b->regions) wsync__fab_dereg(b, b->regions);
    while (b->sources) wsync__fab_dereg(b, b->sources);
    wsync__rdma_free(&b->a, b->job_key);
    wsync__rdma_free(&b->a, b->win_ids);
    pthread_cond_destroy(&b->ref_cv);
    pthread_cond_destroy(&b->imm_cv);
    pthread_mutex_destroy(&b->mu);
}

static wsync_result wsync__fab_check_write(wsync__fab_base *b, const wsync_fabric_mr *src, uint64_t src_off,
                                           const wsync_fabric_remote *dst, uint64_t dst_off, uint64_t len,
                                           wsync_error *err)
{
    if (!b || !src || !dst || src->backend != b->backend || dst->backend != b->backend)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "write: a region or remote of another fabric");
    if (!wsync__rdma_in(src_off, len, src->len))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                "write: source bytes %llu + %llu outside the registered %llu",
                                (unsigned long long)src_off, (unsigned long long)len, (unsigned long long)src->len);
    if (!wsync__rdma_in(dst_off, len, dst->len))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                "write: %llu bytes at %llu outside %s region %u (%llu bytes)", (unsigned long long)len,
                                (unsigned long long)dst_off, dst->peer, (unsigned)dst->region,
                                (unsigned long long)dst->len);
    if (dst->broken)
        return wsync_error_set(err, WSYNC_ERR_IO, "write to %s region %u: %s", dst->peer, (unsigned)dst->region,
                                dst->why);
    return WSYNC_OK;
}

static wsync_result wsync__fab_break(wsync_fabric_remote *r, wsync_error *err, const char *fmt, const char *arg)
{
    r->broken = 1;
    snprintf(r->why, sizeof r->why, fmt, arg);
    return wsync_error_set(err, WSYNC_ERR_IO, "%s region %u: %s", r->peer, (unsigned)r->region, r->why);
}

static const wsync__fab_base *wsync__fab_base_of(const wsync_fabric *f)
{
    if (!f || !f->user ||
        (f->backend != WSYNC_FABRIC_TCP && f->backend != WSYNC_FABRIC_HOST && f->backend != WSYNC_FABRIC_VERBS))
        return NULL;
    return (const wsync__fab_base *)f->user;
}

WSYNC_DEF int wsync_fabric_stats_get(const wsync_fabric *f, wsync_fabric_stats *out)
{
    wsync__fab_base *b = (wsync__fab_base *)wsync__fab_base_of(f);
    if (!b || !out) return 0;
    pthread_mutex_lock(&b->mu);
    *out = b->stats;
    pthread_mutex_unlock(&b->mu);
    return 1;
}

WSYNC_DEF wsync_result wsync_fabric_auth_set(wsync_fabric *f, const void *job_key, size_t key_len, uint32_t sender_id,
                                             wsync_error *err)
{
    wsync__fab_base *b = (wsync__fab_base *)wsync__fab_base_of(f);
    uint8_t *k = NULL, *old;
    size_t old_len;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!b) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "auth_set: not a TCP, one-host or verbs fabric");
    if (key_len > WSYNC__JOB_KEY_MAX || (key_len && !job_key))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "auth_set: a job key of %lu bytes (1..%d)",
                                (unsigned long)key_len, WSYNC__JOB_KEY_MAX);
    if (key_len) {
        if (!(k = (uint8_t *)wsync__rdma_alloc(&b->a, key_len)))
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "auth_set");
        memcpy(k, job_key, key_len);
    }
    pthread_mutex_lock(&b->mu);
    old = b->job_key;
    old_len = b->job_key_len;
    b->job_key = k;
    b->job_key_len = key_len;
    b->self_id = sender_id;
    pthread_mutex_unlock(&b->mu);
    if (old) {
        memset(old, 0, old_len);
        wsync__rdma_free(&b->a, old);
    }
    return WSYNC_OK;
}

static wsync__fab_base *wsync__fab_window_base(wsync_fabric *f, const char *what, wsync_error *err)
{
    wsync__fab_base *b = (wsync__fab_base *)wsync__fab_base_of(f);
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!b) {
        wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s: not a TCP, one-host or verbs fabric", what);
        return NULL;
    }
    if (f->backend != WSYNC_FABRIC_TCP) {
        wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                         "%s: the %s fabric's writes are one-sided (the receiver's CPU never sees them), so "
                         "the receiver cannot refuse one: only the TCP fabric enforces a write window",
                         what, f->backend == WSYNC_FABRIC_HOST ? "one-host" : "verbs");
        return NULL;
    }
    return b;
}

static int wsync__fab_cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, c = *(const uint32_t *)y;
    return a < c ? -1 : a > c;
}

WSYNC_DEF wsync_result wsync_fabric_window_open(wsync_fabric *f, uint64_t step, const uint32_t *senders, size_t n,
                                                wsync_error *err)
{
    wsync__fab_base *b = wsync__fab_window_base(f, "window_open", err);
    uint32_t *ids = NULL, *old;
    if (!b) return err ? err->code : WSYNC_ERR_INVALID_ARGUMENT;
    if (n > 65536 || (n && !senders))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "window_open: %lu senders (0..65536, and a list)",
                                (unsigned long)n);
    if (n) {
        if (!(ids = (uint32_t *)wsync__rdma_alloc(&b->a, n * sizeof *ids)))
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "window_open");
        memcpy(ids, senders, n * sizeof *ids);
        qsort(ids, n, sizeof *ids, wsync__fab_cmp_u32);
    }
    pthread_mutex_lock(&b->mu);
    old = b->win_ids;
    b->win_ids = ids;
    b->win_n = n;
    b->win_step = step;
    b->windowed = b->win_open = 1;
    pthread_mutex_unlock(&b->mu);
    wsync__rdma_free(&b->a, old);
    return WSYNC_OK;
}

/* Closes the window whatever step it was opened for (closing is never
   less safe), cuts the connections inside a frame (a write that passed
   the check before the close does not land after it) and waits for them. */
WSYNC_DEF wsync_result wsync_fabric_window_close(wsync_fabric *f, uint64_t step, wsync_error *err)
{
    wsync__fab_base *b = wsync__fab_window_base(f, "window_close", err);
    wsync__fab_conn *c;
    int busy;
    if (!b) return err ? err->code : WSYNC_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&b->mu);
    b->windowed = 1;
    b->win_open = 0;
    b->win_step = step;
    for (c = b->conns; c; c = c->next)
        if (c->busy) shutdown(c->fd, SHUT_RDWR);
    do {
        for (busy = 0, c = b->conns; c; c = c->next) busy |= c->busy != NULL;
        if (busy) pthread_cond_wait(&b->ref_cv, &b->mu);
    } while (busy);
    pthread_mutex_unlock(&b->mu);
    return WSYNC_OK;
}

/* ---------------------------------------------------------------------
   TCP  >>fabric-tcp
   --------------------------------------------------------------------- */

typedef struct wsync__tcp {
    wsync__fab_base b;         /* first: the fabric's user pointer is both */
    char bind_host[256], adv_host[64];
    unsigned port, connect_timeout_ms, sockbuf, chunk;
} wsync__tcp;

/* Descriptor bytes (version 1): u16 port, u8 host length (1..63), u8 0,
   u32 region, u64 key, then the host. */
#define WSYNC__TCP_DESC_FIXED 16

/* HMAC(K, label || hello || the receiver's nonce || the region's key): K is
   the job key (none: an empty key, and the region's key is the only
   secret). The handshake's two proofs and the connection's key. */
static void wsync__tcp_hs_mac(const wsync_hmac_sha256_state *k, const char *label, const uint8_t *hello,
                              const uint8_t *nonce_s, uint64_t region_key, uint8_t out[32])
{
    wsync_hmac_sha256_state s = *k;
    uint8_t kb[8];
    wsync__rdma_put64(kb, region_key);
    wsync_hmac_sha256_update(&s, label, strlen(label) + 1);
    wsync_hmac_sha256_update(&s, hello, WSYNC__TH_HELLO_LEN);
    wsync_hmac_sha256_update(&s, nonce_s, 32);
    wsync_hmac_sha256_update(&s, kb, sizeof kb);
    wsync_hmac_sha256_final(&s, out);
}

/* out = HMAC-SHA256 of a one-letter label and n bytes of data, under the
   connection's key (mac: its keyed state, copied). */
static void wsync__tcp_mac(const wsync_hmac_sha256_state *mac, const char *label, const uint8_t *data, size_t n,
                           uint8_t out[32])
{
    wsync_hmac_sha256_state s = *mac;
    wsync_hmac_sha256_update(&s, label, 1);
    wsync_hmac_sha256_update(&s, data, n);
    wsync_hmac_sha256_final(&s, out);
}

/* A frame header's tag (over its first 48 bytes) and, when dkey, the
   one-time Poly1305 key of its data: both from the connection's key and
   the header, whose sequence number makes them unique. */
static void wsync__tcp_frame_keys(const wsync_hmac_sha256_state *mac, const uint8_t *h, uint8_t tag[WSYNC__TAG],
                                  uint8_t dkey[32])
{
    uint8_t full[32];
    wsync__tcp_mac(mac, "h", h, 48, full);
    memcpy(tag, full, WSYNC__TAG);
    if (dkey) wsync__tcp_mac(mac, "d", h, 48, dkey);
}

static void wsync__tcp_ack_tag(const wsync_hmac_sha256_state *mac, const uint8_t *a, uint8_t tag[WSYNC__TAG])
{
    uint8_t full[32];
    wsync__tcp_mac(mac, "a", a, 16, full);
    memcpy(tag, full, WSYNC__TAG);
}

static void wsync__tcp_reply(int fd, const wsync_hmac_sha256_state *mac, uint32_t status, uint64_t seq)
{
    uint8_t a[WSYNC__ACK_LEN];
    wsync__rdma_put32(a, WSYNC__ACK_MAGIC);
    wsync__rdma_put32(a + 4, status);
    wsync__rdma_put64(a + 8, seq);
    wsync__tcp_ack_tag(mac, a, a + 16);
    if (wsync__rdma_send_all(fd, a, sizeof a, 0) != 0) { /* the sender sees the closed connection instead */
    }
}

static void wsync__tcp_refuse(wsync__fab_base *b, wsync__fab_conn *c, const wsync_hmac_sha256_state *mac, uint32_t why,
                              uint32_t region, uint64_t off, uint64_t len, uint64_t seq)
{
    wsync__fab_refuse(b, c, "sender %u: %s (region %u, offset %llu, length %llu)", (unsigned)c->sender,
                      wsync__fab_rej_str(why), (unsigned)region, (unsigned long long)off, (unsigned long long)len);
    wsync__tcp_reply(c->fd, mac, why, seq);
    shutdown(c->fd, SHUT_WR);
}

/* The receiver's side of the handshake (TCP AUTHENTICATION), all of it
   by the connection's deadline (auth_timeout_ms after accept): 0 with
   *mac keyed by the connection's key, or -1 (refused and logged). */
static int wsync__tcp_hs_server(wsync__fab_base *b, wsync__fab_conn *c, uint32_t *region,
                                wsync_hmac_sha256_state *mac)
{
    uint8_t hello[WSYNC__TH_HELLO_LEN], chal[WSYNC__TH_CHAL_LEN], proof[WSYNC__TH_PROOF_LEN];
    uint8_t done[WSYNC__TH_DONE_LEN], want[32], ck[32];
    wsync_hmac_sha256_state k;
    struct wsync_fabric_mr *m;
    uint64_t region_key = 0;
    uint32_t status = 0, sender;
    int rc = wsync__rdma_recv_by(c->fd, hello, sizeof hello, (int)b->auth_timeout_ms, 0, c->deadline);
    if (rc != 1) {
        if (rc == 0) { /* closed before a byte: a probe (one closed for a newer one is counted as refused) */
            pthread_mutex_lock(&b->mu);
            if (!c->evicted) b->stats.dropped++;
            pthread_mutex_unlock(&b->mu);
        } else {
            wsync__fab_refuse(b, c, "no complete handshake within %u ms: closed", b->auth_timeout_ms);
        }
        return -1;
    }
    *region = wsync__rdma_get32(hello + 8);
    sender = wsync__rdma_get32(hello + 12);
    c->sender = sender;
    if (wsync__rdma_get32(hello) != WSYNC__TH_HELLO || wsync__rdma_get32(hello + 4) != 1 ||
        wsync__rdma_get64(hello + 48) != 0)
        status = WSYNC__REJ_MAGIC;
    pthread_mutex_lock(&b->mu);
    c->said_hello = 1;
    if (!status) {
        m = wsync__fab_find(b, *region);
        if (!m) status = WSYNC__REJ_REGION;
        else region_key = m->key;
    }
    wsync_hmac_sha256_init(&k, b->job_key ? (const void *)b->job_key : (const void *)"", b->job_key_len);
    pthread_mutex_unlock(&b->mu);
    memset(chal, 0, sizeof chal);
    wsync__rdma_put32(chal, WSYNC__TH_CHAL);
    if (!status && wsync_random_bytes(chal + 8, 32) != WSYNC_OK) status = WSYNC__REJ_AUTH;
    wsync__rdma_put32(chal + 4, status);
    if (!status) wsync__tcp_hs_mac(&k, "wsync tcp fabric: receiver", hello, chal + 8, region_key, chal + 40);
    if (wsync__rdma_send_all(c->fd, chal, sizeof chal, 0) != 0 || status) {
        wsync__fab_refuse(b, c, "handshake refused: %s (claims sender %u, region %u)",
                          status ? wsync__fab_rej_str(status) : "the connection closed", (unsigned)sender,
                          (unsigned)*region);
        return -1;
    }
    rc = wsync__rdma_recv_by(c->fd, proof, sizeof proof, (int)b->auth_timeout_ms, 0, c->deadline);
    if (rc != 1) {
        wsync__fab_refuse(b, c, "gave no proof of the job key (%s; claims sender %u, region %u)",
                          rc == 0 ? "it hung up: another key, or none" : "none within the deadline: closed",
                          (unsigned)sender, (unsigned)*region);
        return -1;
    }
    wsync__tcp_hs_mac(&k, "wsync tcp fabric: sender", hello, chal + 8, region_key, want);
    if (wsync__rdma_get32(proof) != WSYNC__TH_PROOF || wsync__rdma_get32(proof + 4) != 0 ||
        !wsync_ct_equal(proof + 8, want, 32))
        status = WSYNC__REJ_AUTH;
    else if (wsync__fab_authed(b, c, sender) != 0)
        status = WSYNC__REJ_BUSY;
    wsync__rdma_put32(done, WSYNC__TH_DONE);
    wsync__rdma_put32(done + 4, status);
    wsync__rdma_put64(done + 8, 0);
    if (wsync__rdma_send_all(c->fd, done, sizeof done, 0) != 0 && !status) status = WSYNC__REJ_AUTH;
    if (status) {
        wsync__fab_refuse(b, c, "handshake refused: %s (claims sender %u, region %u)", wsync__fab_rej_str(status),
                          (unsigned)sender, (unsigned)*region);
        shutdown(c->fd, SHUT_WR);
        return -1;
    }
    wsync__tcp_hs_mac(&k, "wsync tcp fabric: connection key", hello, chal + 8, region_key, ck);
    wsync_hmac_sha256_init(mac, ck, sizeof ck);
    memset(ck, 0, sizeof ck);
    return 0;
}

/* Receives a frame's len bytes straight into dst, its Poly1305 tag computed
   on the way (a piece at a time, while the bytes are in cache). 1, or -1. */
static int wsync__tcp_recv_data(wsync__fab_base *b, int fd, uint8_t *dst, uint64_t len, const uint8_t dkey[32],
                                uint8_t tag[WSYNC__TAG])
{
    wsync__dtag p;
    wsync__dtag_init(&p, b->data_tag, dkey);
    while (len) {
        size_t n = len > (256u << 10) ? (size_t)(256u << 10) : (size_t)len;
        if (wsync__rdma_recv_full(fd, dst, n, (int)b->timeout_ms, 0) != 1) return -1;
        wsync__dtag_update(&p, dst, n);
        dst += n;
        len -= n;
    }
    wsync__dtag_final(&p, tag);
    return 1;
}

/* One sender's connection: the handshake, then frames in order, each
   checked (tag, sequence, type, region, bounds, window) before a byte of
   it lands in a region; the payload is received straight into the region
   and its tag checked after (a bad one is refused: the sender's flush
   fails, so its step cannot commit). */
static void wsync__tcp_serve(wsync__fab_base *b, wsync__fab_conn *c)
{
    uint8_t h[WSYNC__TCP_HDR], tag[WSYNC__TAG], dkey[32], got[WSYNC__TAG];
    wsync_hmac_sha256_state mac;
    uint32_t conn_region = 0;
    uint64_t expect = 1;
    if (wsync__tcp_hs_server(b, c, &conn_region, &mac) != 0) return;
    for (;;) {
        uint32_t magic, type, region, imm, why = 0;
        uint64_t off, len, seq;
        struct wsync_fabric_mr *m = NULL;
        int rc;
        rc = wsync__rdma_recv_full(c->fd, h, sizeof h, (int)b->timeout_ms, 1);
        if (rc == 0) return;
        if (rc < 0) {
            pthread_mutex_lock(&b->mu);
            b->stats.dropped++;
            pthread_mutex_unlock(&b->mu);
            return;
        }
        magic = wsync__rdma_get32(h);
        type = wsync__rdma_get32(h + 4);
        region = wsync__rdma_get32(h + 8);
        imm = wsync__rdma_get32(h + 12);
        off = wsync__rdma_get64(h + 16);
        len = wsync__rdma_get64(h + 24);
        seq = wsync__rdma_get64(h + 32);
        wsync__tcp_frame_keys(&mac, h, tag, dkey);
        if (magic != WSYNC__TCP_MAGIC) why = WSYNC__REJ_MAGIC;
        else if (!wsync_ct_equal(tag, h + 48, WSYNC__TAG)) why = WSYNC__REJ_MAC;
        else if (seq != expect) why = WSYNC__REJ_SEQ;
        else if (type < WSYNC__FR_WRITE || type > WSYNC__FR_FLUSH || wsync__rdma_get64(h + 40) != 0)
            why = WSYNC__REJ_MAGIC;
        if (why) {
            wsync__tcp_refuse(b, c, &mac, why, region, off, len, seq);
            return;
        }
        expect++;
        if (type == WSYNC__FR_FLUSH) {
            if (region || imm || off || len) {
                wsync__tcp_refuse(b, c, &mac, WSYNC__REJ_FLUSH, region, off, len, seq);
                return;
            }
            /* everything before this frame is in the regions: publish it before the ack */
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            wsync__tcp_reply(c->fd, &mac, 0, seq);
            continue;
        }
        pthread_mutex_lock(&b->mu);
        if (region == conn_region) m = wsync__fab_find(b, region);
        if (!m) why = WSYNC__REJ_REGION;
        else if (!wsync__rdma_in(off, len, m->len)) why = WSYNC__REJ_BOUNDS;
        else if (!wsync__fab_window_ok(b, c->sender)) why = WSYNC__REJ_WINDOW;
        else {
            m->refs++;
            c->busy = m;
        }
        pthread_mutex_unlock(&b->mu);
        if (why) {
            wsync__tcp_refuse(b, c, &mac, why, region, off, len, seq);
            return;
        }
        rc = len ? wsync__tcp_recv_data(b, c->fd, m->addr + off, len, dkey, got) : 1;
        if (rc == 1 && len)
            rc = wsync__rdma_recv_full(c->fd, tag, WSYNC__TAG, (int)b->timeout_ms, 0) != 1 ? -1
                 : wsync_ct_equal(tag, got, WSYNC__TAG)                                    ? 1
                                                                                          : 2;
        pthread_mutex_lock(&b->mu);
        m->refs--;
        c->busy = NULL;
        if (m->refs == 0) pthread_cond_broadcast(&b->ref_cv);
        if (rc == 1) {
            b->stats.frames++;
            b->stats.bytes += len;
            if (type == WSYNC__FR_IMM) {
                __atomic_thread_fence(__ATOMIC_RELEASE);
                why = (uint32_t)wsync__fab_imm_push(b, m, imm);
            }
        } else if (rc < 0) {
            b->stats.dropped++;
        }
        pthread_mutex_unlock(&b->mu);
        if (rc < 0) return;
        if (rc == 2) why = WSYNC__REJ_MAC; /* the bytes landed: the refusal fails the sender's flush */
        if (why) {
            wsync__tcp_refuse(b, c, &mac, why, region, off, len, seq);
            return;
        }
    }
}

static wsync_result wsync__tcp_listen(wsync__tcp *t, wsync_error *err)
{
    struct addrinfo hints, *res = NULL, *ai;
    char port[16];
    int fd = -1, one = 1, gai, e = 0;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(port, sizeof port, "%u", t->port);
    gai = getaddrinfo(t->bind_host, port, &hints, &res);
    if (gai != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: cannot resolve bind host '%s': %s", t->bind_host,
                                gai_strerror(gai));
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        wsync__rdma_big_buffers(fd, t->sockbuf); /* accepted sockets inherit them */
        /* a short accept queue on purpose: the acceptor takes connections as
           they come (idle ones are closed by wsync__fab_victim, not held in
           the queue), and under a sustained flood a deep FIFO queue puts
           thousands of the flood's connections ahead of a real sender's (with
           4096, 3 to 10 of its handshakes got through in 1.5 s of the flood
           test against 10 of 10 with 128) */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: cannot listen on %s port %u: %s", t->bind_host,
                                t->port, strerror(e));
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        t->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return wsync__fab_srv_start(&t->b, fd, err);
}

static wsync_result wsync__tcp_reg(void *user, void *addr, uint64_t len, wsync_mem_kind kind, wsync_fabric_mr **mr,
                                   wsync_fabric_desc *desc, wsync_error *err)
{
    wsync__tcp *t = (wsync__tcp *)user;
    struct wsync_fabric_mr *m;
    wsync_result r;
    size_t hl;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!t || !mr || !desc) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "reg arguments");
    memset(desc, 0, sizeof *desc);
    if (!t->b.send_only && !t->b.started && (r = wsync__tcp_listen(t, err)) != WSYNC_OK) return r;
    if ((r = wsync__fab_reg_common(&t->b, addr, len, kind, &m, err)) != WSYNC_OK) return r;
    wsync__fab_link(&t->b, m);
    desc->backend = WSYNC_FABRIC_TCP;
    desc->kind = WSYNC_MEM_HOST;
    desc->version = 1;
    desc->addr = (uint64_t)(uintptr_t)addr;
    desc->len = len;
    if (m->linked) { /* a send_only fabric's descriptor names no endpoint: peers cannot open it */
        hl = strlen(t->adv_host);
        desc->bytes[0] = (uint8_t)t->port;
        desc->bytes[1] = (uint8_t)(t->port >> 8);
        desc->bytes[2] = (uint8_t)hl;
        wsync__rdma_put32(desc->bytes + 4, m->id);
        wsync__rdma_put64(desc->bytes + 8, m->key);
        memcpy(desc->bytes + WSYNC__TCP_DESC_FIXED, t->adv_host, hl);
        desc->n_bytes = (uint32_t)(WSYNC__TCP_DESC_FIXED + hl);
    }
    *mr = m;
    return WSYNC_OK;
}

/* Connects with a timeout; the socket is blocking afterwards. */
static int wsync__tcp_connect(const char *host, unsigned port, unsigned timeout_ms, char *why, size_t cap)
{
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    int fd = -1, gai;
    int64_t deadline = wsync__rdma_now_ms() + timeout_ms;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(ps, sizeof ps, "%u", port);
    gai = getaddrinfo(host, ps, &hints, &res);
    if (gai != 0) {
        snprintf(why, cap, "cannot resolve '%s': %s", host, gai_strerror(gai));
        return -1;
    }
    snprintf(why, cap, "%s", "no address");
    for (ai = res; ai; ai = ai->ai_next) {
        int e = 0, rc;
        socklen_t el = sizeof e;
        struct pollfd pf;
        int64_t left = deadline - wsync__rdma_now_ms();
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            snprintf(why, cap, "socket: %s", strerror(errno));
            continue;
        }
        rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            pf.fd = fd;
            pf.events = POLLOUT;
            pf.revents = 0;
            do {
                rc = poll(&pf, 1, left > 0 ? (int)left : 0);
            } while (rc < 0 && errno == EINTR);
            if (rc == 0) {
                snprintf(why, cap, "no connection within %u ms", timeout_ms);
                rc = -1;
            } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
                snprintf(why, cap, "connect: %s", strerror(e ? e : errno));
                rc = -1;
            } else {
                rc = 0;
            }
        } else if (rc != 0) {
            snprintf(why, cap, "connect: %s", strerror(errno));
        }
        if (rc == 0) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* The sender's side of the handshake on a connected fd, by timeout_ms:
   WSYNC_OK with *mac keyed by the connection's key. */
static wsync_result wsync__tcp_hs_client(int fd, const void *key, size_t key_len, uint32_t sender, uint32_t region,
                                         uint64_t region_key, unsigned timeout_ms, const char *peer,
                                         wsync_hmac_sha256_state *mac, wsync_error *err)
{
    uint8_t hello[WSYNC__TH_HELLO_LEN], chal[WSYNC__TH_CHAL_LEN], proof[WSYNC__TH_PROOF_LEN];
    uint8_t done[WSYNC__TH_DONE_LEN], want[32], ck[32];
    wsync_hmac_sha256_state k;
    int64_t deadline = wsync__rdma_now_ms() + timeout_ms;
    int rc;
    memset(hello, 0, sizeof hello);
    wsync__rdma_put32(hello, WSYNC__TH_HELLO);
    wsync__rdma_put32(hello + 4, 1);
    wsync__rdma_put32(hello + 8, region);
    wsync__rdma_put32(hello + 12, sender);
    if (wsync_random_bytes(hello + 16, 32) != WSYNC_OK)
        return wsync_error_set(err, WSYNC_ERR_IO, "%s", "TCP fabric: no system randomness for the handshake's nonce");
    if (wsync__rdma_send_all(fd, hello, sizeof hello, 0) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: handshake with %s: %s", peer, strerror(errno));
    rc = wsync__rdma_recv_by(fd, chal, sizeof chal, (int)timeout_ms, 0, deadline);
    if (rc != 1 || wsync__rdma_get32(chal) != WSYNC__TH_CHAL)
        return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: handshake with %s: %s", peer,
                                rc == 1 ? "not a wsync TCP fabric receiver (bad reply)"
                                : rc == 0 ? "the receiver closed the connection"
                                          : errno == ETIMEDOUT ? "no reply within the timeout" : strerror(errno));
    if (wsync__rdma_get32(chal + 4) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: %s refused the handshake: %s", peer,
                                wsync__fab_rej_str(wsync__rdma_get32(chal + 4)));
    wsync_hmac_sha256_init(&k, key ? key : (const void *)"", key ? key_len : 0);
    wsync__tcp_hs_mac(&k, "wsync tcp fabric: receiver", hello, chal + 8, region_key, want);
    if (!wsync_ct_equal(want, chal + 40, 32))
        return wsync_error_set(err, WSYNC_ERR_IO,
                                "TCP fabric: %s did not prove the job key: another job's key (or none where this "
                                "side has one), or not the receiver this descriptor names",
                                peer);
    wsync__rdma_put32(proof, WSYNC__TH_PROOF);
    wsync__rdma_put32(proof + 4, 0);
    wsync__tcp_hs_mac(&k, "wsync tcp fabric: sender", hello, chal + 8, region_key, proof + 8);
    if (wsync__rdma_send_all(fd, proof, sizeof proof, 0) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: handshake with %s: %s", peer, strerror(errno));
    rc = wsync__rdma_recv_by(fd, done, sizeof done, (int)timeout_ms, 0, deadline);
    if (rc != 1 || wsync__rdma_get32(done) != WSYNC__TH_DONE)
        return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: handshake with %s: %s", peer,
                                rc == 1 ? "a bad final reply" : "no final reply (refused, or it timed out)");
    if (wsync__rdma_get32(done + 4) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: %s refused the handshake: %s", peer,
                                wsync__fab_rej_str(wsync__rdma_get32(done + 4)));
    wsync__tcp_hs_mac(&k, "wsync tcp fabric: connection key", hello, chal + 8, region_key, ck);
    wsync_hmac_sha256_init(mac, ck, sizeof ck);
    memset(ck, 0, sizeof ck);
    return WSYNC_OK;
}

static wsync_result wsync__tcp_open_remote(void *user, const wsync_fabric_desc *d, wsync_fabric_remote **out,
                                           wsync_error *err)
{
    wsync__tcp *t = (wsync__tcp *)user;
    struct wsync_fabric_remote *r;
    char host[64], why[160];
    unsigned port, hl;
    int fd, one = 1;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!t || !d || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "open_remote arguments");
    *out = NULL;
    if (d->backend != WSYNC_FABRIC_TCP || d->version != 1 || d->kind != WSYNC_MEM_HOST)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "not a TCP fabric descriptor (backend %u, version %u, kind %u)", (unsigned)d->backend,
                                (unsigned)d->version, (unsigned)d->kind);
    if (d->n_bytes < WSYNC__TCP_DESC_FIXED + 1 || d->n_bytes > WSYNC_FABRIC_DESC_MAX)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "TCP descriptor: %u backend bytes (a send-only fabric's?)", (unsigned)d->n_bytes);
    port = (unsigned)d->bytes[0] | (unsigned)d->bytes[1] << 8;
    hl = d->bytes[2];
    if (hl == 0 || hl >= sizeof host || d->n_bytes != WSYNC__TCP_DESC_FIXED + hl || d->bytes[3] || port == 0 ||
        d->len == 0)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "TCP descriptor: malformed endpoint");
    memcpy(host, d->bytes + WSYNC__TCP_DESC_FIXED, hl);
    host[hl] = 0;
    if (strlen(host) != hl)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "TCP descriptor: NUL in host");
    fd = wsync__tcp_connect(host, port, t->connect_timeout_ms, why, sizeof why);
    if (fd < 0) return wsync_error_set(err, WSYNC_ERR_IO, "TCP fabric: %s port %u: %s", host, port, why);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    wsync__rdma_big_buffers(fd, t->sockbuf);
    wsync__rdma_set_timeouts(fd, t->b.timeout_ms);
    r = (struct wsync_fabric_remote *)wsync__rdma_alloc(&t->b.a, sizeof *r);
    if (!r) {
        close(fd);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "open_remote");
    }
    r->backend = WSYNC_FABRIC_TCP;
    r->fd = fd;
    r->region = wsync__rdma_get32(d->bytes + 4);
    r->key = wsync__rdma_get64(d->bytes + 8);
    r->addr = d->addr;
    r->len = d->len;
    snprintf(r->peer, sizeof r->peer, "%s:%u", host, port);
    {
        /* the key copied out: no lock held across the network (this
           fabric's own receiver thread may be the other end) */
        uint8_t key[WSYNC__JOB_KEY_MAX];
        size_t kl;
        uint32_t self;
        wsync_result hr;
        pthread_mutex_lock(&t->b.mu);
        kl = t->b.job_key ? t->b.job_key_len : 0;
        if (kl) memcpy(key, t->b.job_key, kl);
        self = t->b.self_id;
        pthread_mutex_unlock(&t->b.mu);
        hr = wsync__tcp_hs_client(fd, kl ? key : NULL, kl, self, r->region, r->key, t->connect_timeout_ms, r->peer,
                                  &r->mac, err);
        memset(key, 0, kl);
        if (hr != WSYNC_OK) {
            close(fd);
            wsync__rdma_free(&t->b.a, r);
            return hr;
        }
    }
    r->next = t->b.remotes;
    t->b.remotes = r;
    *out = r;
    return WSYNC_OK;
}

/* The next frame's header on r's connection, tagged; dkey: its data's key. */
static void wsync__tcp_hdr(uint8_t *h, uint32_t type, struct wsync_fabric_remote *r, uint32_t imm, uint64_t off,
                           uint64_t len, uint8_t dkey[32])
{
    wsync__rdma_put32(h, WSYNC__TCP_MAGIC);
    wsync__rdma_put32(h + 4, type);
    wsync__rdma_put32(h + 8, type == WSYNC__FR_FLUSH ? 0 : r->region);
    wsync__rdma_put32(h + 12, imm);
    wsync__rdma_put64(h + 16, off);
    wsync__rdma_put64(h + 24, len);
    wsync__rdma_put64(h + 32, ++r->fseq);
    wsync__rdma_put64(h + 40, 0);
    wsync__tcp_frame_keys(&r->mac, h, h + 48, dkey);
}

/* An ack from r's receiver: 1 when its magic and tag are right. */
static int wsync__tcp_ack_ok(const struct wsync_fabric_remote *r, const uint8_t *a)
{
    uint8_t tag[WSYNC__TAG];
    if (wsync__rdma_get32(a) != WSYNC__ACK_MAGIC) return 0;
    wsync__tcp_ack_tag(&r->mac, a, tag);
    return wsync_ct_equal(tag, a + 16, WSYNC__TAG);
}

/* A send failed or the connection ended: the receiver may have said why
   (a refusal) before it closed; that is the reason to report. */
static wsync_result wsync__tcp_broken(struct wsync_fabric_remote *r, wsync_error *err, const char *what, int e)
{
    uint8_t a[WSYNC__ACK_LEN];
    char why[160];
    ssize_t n = recv(r->fd, a, sizeof a, MSG_DONTWAIT);
    if (n == (ssize_t)sizeof a && wsync__tcp_ack_ok(r, a) && wsync__rdma_get32(a + 4) != 0)
        return wsync__fab_break(r, err, "the receiver refused a write: %s",
                                wsync__fab_rej_str(wsync__rdma_get32(a + 4)));
    snprintf(why, sizeof why, "%s: %s", what, e == ETIMEDOUT ? "no progress within the timeout" : strerror(e));
    return wsync__fab_break(r, err, "%s", why);
}

static wsync_result wsync__tcp_send(wsync__tcp *t, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                    uint64_t dst_off, uint64_t len, uint32_t type, uint32_t imm, wsync_error *err)
{
    uint8_t h[WSYNC__TCP_HDR], dkey[32], tag[WSYNC__TAG];
    const uint8_t *p;
    wsync__dtag poly;
    wsync_result r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if ((r = wsync__fab_check_write(t ? &t->b : NULL, src, src_off, dst, dst_off, len, err)) != WSYNC_OK) return r;
    if (len == 0 && type == WSYNC__FR_WRITE) return WSYNC_OK;
    wsync__tcp_hdr(h, type, dst, imm, dst_off, len, dkey);
    if (wsync__rdma_send_all(dst->fd, h, sizeof h, len != 0) != 0)
        return wsync__tcp_broken(dst, err, "sending a frame", errno);
    /* straight from the registered source, a chunk per call, the tag computed on the way */
    wsync__dtag_init(&poly, t->b.data_tag, dkey);
    p = src->addr + src_off;
    while (len) {
        /* the tag over a piece while it is in cache, then the piece: the
           receiver works on one piece while this side tags the next */
        size_t n = len > t->chunk ? t->chunk : (size_t)len;
        if (n > (256u << 10)) n = 256u << 10;
        wsync__dtag_update(&poly, p, n);
        if (wsync__rdma_send_all(dst->fd, p, n, 1) != 0)
            return wsync__tcp_broken(dst, err, "sending a frame's bytes", errno);
        p += n;
        len -= n;
        if (!len) {
            wsync__dtag_final(&poly, tag);
            if (wsync__rdma_send_all(dst->fd, tag, sizeof tag, 0) != 0)
                return wsync__tcp_broken(dst, err, "sending a frame's tag", errno);
        }
    }
    dst->pending++;
    return WSYNC_OK;
}

static wsync_result wsync__tcp_write(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                     uint64_t dst_off, uint64_t len, wsync_error *err)
{
    return wsync__tcp_send((wsync__tcp *)user, src, src_off, dst, dst_off, len, WSYNC__FR_WRITE, 0, err);
}

static wsync_result wsync__tcp_write_imm(void *user, wsync_fabric_mr *src, uint64_t src_off,
                                         wsync_fabric_remote *dst, uint64_t dst_off, uint64_t len, uint32_t imm,
                                         wsync_error *err)
{
    return wsync__tcp_send((wsync__tcp *)user, src, src_off, dst, dst_off, len, WSYNC__FR_IMM, imm, err);
}

/* Sends a flush frame to every remote written to since the last flush,
   then collects the acks (pipelined, one deadline for all). */
static wsync_result wsync__tcp_flush(void *user, wsync_error *err)
{
    wsync__tcp *t = (wsync__tcp *)user;
    struct wsync_fabric_remote *r;
    wsync_result res = WSYNC_OK;
    int64_t deadline;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!t) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "flush arguments");
    for (r = t->b.remotes; r; r = r->next) {
        uint8_t h[WSYNC__TCP_HDR];
        if (r->broken || !r->pending) continue;
        wsync__tcp_hdr(h, WSYNC__FR_FLUSH, r, 0, 0, 0, NULL);
        if (wsync__rdma_send_all(r->fd, h, sizeof h, 0) != 0) {
            wsync__tcp_broken(r, NULL, "sending a flush", errno);
            continue;
        }
        r->seq = r->fseq;
    }
    deadline = wsync__rdma_now_ms() + t->b.timeout_ms;
    for (r = t->b.remotes; r; r = r->next) {
        uint8_t a[WSYNC__ACK_LEN];
        int64_t left;
        int rc;
        if (r->broken || !r->pending) continue;
        left = deadline - wsync__rdma_now_ms();
        rc = wsync__rdma_recv_full(r->fd, a, sizeof a, left > 0 ? (int)left : 0, 0);
        if (rc != 1) {
            char why[96];
            snprintf(why, sizeof why, "%s", rc == 0 ? "the receiver closed the connection"
                                     : errno == ETIMEDOUT ? "no acknowledgement within the timeout"
                                                          : strerror(errno));
            wsync__fab_break(r, NULL, "flush: %s", why);
            continue;
        }
        if (!wsync__tcp_ack_ok(r, a)) {
            wsync__fab_break(r, NULL, "flush: %s", "a malformed or forged acknowledgement (its tag is wrong)");
            continue;
        }
        if (wsync__rdma_get32(a + 4) != 0) {
            wsync__fab_break(r, NULL, "the receiver refused a write: %s", wsync__fab_rej_str(wsync__rdma_get32(a + 4)));
            continue;
        }
        if (wsync__rdma_get64(a + 8) != r->seq) {
            wsync__fab_break(r, NULL, "flush: %s", "acknowledgement out of sequence");
            continue;
        }
        r->pending = 0;
    }
    for (r = t->b.remotes; r; r = r->next)
        if (r->broken && res == WSYNC_OK) {
            res = wsync_error_set(err, WSYNC_ERR_IO, "flush: %s region %u: %s", r->peer, (unsigned)r->region, r->why);
        }
    return res;
}

static void wsync__tcp_close(void *user)
{
    wsync__tcp *t = (wsync__tcp *)user;
    wsync_allocator a;
    if (!t) return;
    a = t->b.a;
    wsync__fab_base_close(&t->b);
    wsync__rdma_free(&a, t);
}

WSYNC_DEF wsync_result wsync_fabric_tcp_open(const wsync_fabric_tcp_options *opt, wsync_fabric *out,
                                             wsync_error *err)
{
    wsync_fabric_tcp_options o;
    wsync_allocator a;
    wsync__tcp *t;
    wsync_result r;
    const char *adv;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "tcp_open arguments");
    memset(out, 0, sizeof *out);
    if (opt) o = *opt;
    else memset(&o, 0, sizeof o);
    a = o.allocator;
    if (!o.bind_host || !*o.bind_host) o.bind_host = "127.0.0.1";
    if (strlen(o.bind_host) >= 256 || (o.advertise_host && strlen(o.advertise_host) >= 64) || o.port > 65535)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "TCP fabric: host name too long or bad port");
    t = (wsync__tcp *)wsync__rdma_alloc(&a, sizeof *t);
    if (!t) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "tcp_open");
    if ((r = wsync__fab_base_init(&t->b, WSYNC_FABRIC_TCP, &a, err)) != WSYNC_OK) {
        wsync__rdma_free(&a, t);
        return r;
    }
    t->b.serve = wsync__tcp_serve;
    t->b.timeout_ms = o.timeout_ms ? o.timeout_ms : 10000;
    t->b.max_conns = o.max_connections ? o.max_connections : 256;
    if (o.auth_timeout_ms) t->b.auth_timeout_ms = o.auth_timeout_ms;
    if (o.max_unauthenticated) t->b.max_pending = o.max_unauthenticated;
    t->b.log = o.log;
    t->b.log_user = o.log_user;
    t->b.send_only = o.send_only;
    snprintf(t->bind_host, sizeof t->bind_host, "%s", o.bind_host);
    adv = o.advertise_host && *o.advertise_host ? o.advertise_host : NULL;
    if (!adv && strcmp(o.bind_host, "0.0.0.0") != 0 && strcmp(o.bind_host, "::") != 0) adv = o.bind_host;
    if (adv) snprintf(t->adv_host, sizeof t->adv_host, "%s", adv);
    else if (gethostname(t->adv_host, sizeof t->adv_host - 1) != 0 || !t->adv_host[0])
        snprintf(t->adv_host, sizeof t->adv_host, "%s", "127.0.0.1");
    if (!t->adv_host[0] || strlen(t->adv_host) > 63) {
        wsync__tcp_close(t);
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "TCP fabric: advertised host too long");
    }
    t->port = o.port;
    t->connect_timeout_ms = o.connect_timeout_ms ? o.connect_timeout_ms : 5000;
    t->sockbuf = o.socket_buffer ? o.socket_buffer : 8u << 20;
    if (t->sockbuf > (unsigned)INT32_MAX) t->sockbuf = (unsigned)INT32_MAX;
    t->chunk = o.chunk ? o.chunk : 4u << 20;
    out->user = t;
    out->backend = WSYNC_FABRIC_TCP;
    if (o.job_key_len || o.sender_id) {
        wsync_result ar = wsync_fabric_auth_set(out, o.job_key, o.job_key_len, o.sender_id, err);
        if (ar != WSYNC_OK) {
            memset(out, 0, sizeof *out);
            wsync__tcp_close(t);
            return ar;
        }
    }
    out->backend = WSYNC_FABRIC_TCP;
    out->reg = wsync__tcp_reg;
    out->dereg = wsync__fab_dereg;
    out->open_remote = wsync__tcp_open_remote;
    out->close_remote = wsync__fab_close_remote;
    out->write = wsync__tcp_write;
    out->write_imm = wsync__tcp_write_imm;
    out->recv_imm = wsync__fab_recv_imm;
    out->flush = wsync__tcp_flush;
    out->close = wsync__tcp_close;
    return WSYNC_OK;
}

WSYNC_DEF unsigned wsync_fabric_tcp_port(const wsync_fabric *f)
{
    const wsync__tcp *t;
    if (!f || f->backend != WSYNC_FABRIC_TCP || !f->user) return 0;
    t = (const wsync__tcp *)f->user;
    return t->b.started ? t->port : 0;
}

/* ---------------------------------------------------------------------
   One host: process_vm_writev (CMA) or shared memory (SHM)  >>fabric-host
   --------------------------------------------------------------------- */

typedef struct wsync__host_mem {
    struct wsync__host_mem *next;
    uint8_t *ptr;
    uint64_t len;
    int fd;
} wsync__host_mem;

typedef struct wsync__host {
    wsync__fab_base b;         /* first: the fabric's user pointer is both */
    wsync_fabric_host_mode mode;
    wsync__host_mem *mem;
    char name[WSYNC__HOST_NAME_MAX + 1];  /* the socket's path: a file in dir */
    char dir[WSYNC__HOST_NAME_MAX - 8];   /* a 0700 directory of its own */
    int allow_writers;
    long ptracer;              /* the pid named with PR_SET_PTRACER (0: none) */
    volatile uint64_t probe;   /* senders test CMA by writing here */
} wsync__host;

#define WSYNC__HOST_CMA 1u
#define WSYNC__HOST_SHM 2u
/* Descriptor bytes (version 1): u32 pid, u32 region, u64 key, u64 probe
   address, u64 shm offset, u64 shm size, u8 name length, name.
   flags: WSYNC__HOST_CMA | WSYNC__HOST_SHM, what the region offers. */
#define WSYNC__HOST_DESC_FIXED 41

static int wsync__host_unix_addr(const char *name, struct sockaddr_un *sa, socklen_t *sl)
{
    size_t n = strlen(name);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (n + 1 > sizeof sa->sun_path || name[0] != '/') return -1;
    memcpy(sa->sun_path, name, n); /* a path: the directory's mode (0700) keeps other users out */
    *sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return 0;
}

/* The parent of pid (/proc/PID/stat), or -1. */
static long wsync__host_ppid(long pid)
{
    char path[64], buf[512];
    const char *p;
    long pp = -1;
    FILE *f;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    if (!(f = fopen(path, "r"))) return -1;
    if (fgets(buf, sizeof buf, f) && (p = strrchr(buf, ')')) != NULL && sscanf(p + 1, " %*c %ld", &pp) != 1) pp = -1;
    fclose(f);
    return pp;
}

/* The nearest process both a and b are (or descend from), or -1. */
static long wsync__host_common(long a, long b)
{
    long chain[64], x;
    int n = 0, i, depth;
    for (x = a; x > 0 && n < 64; x = wsync__host_ppid(x)) chain[n++] = x;
    for (x = b, depth = 0; x > 0 && depth < 64; x = wsync__host_ppid(x), depth++)
        for (i = 0; i < n; i++)
            if (chain[i] == x) return x;
    return -1;
}

/* allow_any_writer: lets the writer pid use CMA under Yama ptrace_scope 1.
   Yama keeps ONE ptracer exception per process (each PR_SET_PTRACER call
   replaces it) and it covers the named process and its descendants; so
   the first writer is named, and a later other one moves the exception to
   the nearest process both descend from (the launcher of siblings), never
   to pid 1 (that would be any process of this uid, PR_SET_PTRACER_ANY in
   effect): such a writer is left to SHM, or told why CMA is refused. The
   kernel's own checks (same uid, or CAP_SYS_PTRACE) still apply on top. */
static void wsync__host_name_writer(wsync__host *h, long pid)
{
#if defined(PR_SET_PTRACER)
    long target;
    pthread_mutex_lock(&h->b.mu);
    target = !h->ptracer ? pid : h->ptracer == pid ? 0 : wsync__host_common(h->ptracer, pid);
    if (target > 1 && target != h->ptracer && prctl(PR_SET_PTRACER, (unsigned long)target, 0, 0, 0) == 0)
        h->ptracer = target;
    pthread_mutex_unlock(&h->b.mu);
#else
    (void)h;
    (void)pid;
#endif
}

/* A peer of the one-host fabric runs as this process's user, or as root
   (who could read and write any process's memory anyway). */
static int wsync__host_uid_ok(uid_t uid)
{
    return uid == geteuid() || uid == 0;
}

/* A sender's connection: a handshake (region, key; the fd back in SHM
   mode), then immediates. The receiver writes nothing else on it, so the
   sender reads its closing as "the receiver has gone". */
static void wsync__host_serve(wsync__fab_base *b, wsync__fab_conn *c)
{
    uint8_t h[WSYNC__HELLO_LEN], rep[WSYNC__REPLY_LEN];
    uint32_t region, status = 0, offers = 0;
    uint64_t key, shm_off = 0, shm_size = 0;
    int want_shm, shm_fd = -1;
    struct ucred cred;
    struct wsync_fabric_mr *m;
    struct msghdr msg;
    struct iovec iov;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    if (wsync__rdma_recv_by(c->fd, h, sizeof h, (int)b->auth_timeout_ms, 0, c->deadline) != 1) {
        wsync__fab_refuse(b, c, "no complete one-host handshake within %u ms: closed", b->auth_timeout_ms);
        return;
    }
    {
        /* the socket's directory is 0700, and its path is listed in
           /proc/net/unix: only this user (or root) may write the weights or
           receive the memfd */
        socklen_t cl = sizeof cred;
        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || !wsync__host_uid_ok(cred.uid)) {
            wsync__fab_refuse(b, c, "one-host handshake refused: %s", wsync__fab_rej_str(WSYNC__REJ_PEER));
            memset(rep, 0, sizeof rep);
            wsync__rdma_put32(rep, WSYNC__REPLY_MAGIC);
            wsync__rdma_put32(rep + 4, WSYNC__REJ_PEER);
            (void)send(c->fd, rep, sizeof rep, MSG_NOSIGNAL);
            return;
        }
    }
    region = wsync__rdma_get32(h + 4);
    key = wsync__rdma_get64(h + 8);
    want_shm = wsync__rdma_get32(h + 16) != 0;
    pthread_mutex_lock(&b->mu);
    m = wsync__fab_find(b, region);
    if (wsync__rdma_get32(h) != WSYNC__HELLO_MAGIC) status = WSYNC__REJ_MAGIC;
    else if (!m) status = WSYNC__REJ_REGION;
    else if (m->key != key) status = WSYNC__REJ_KEY;
    else {
        c->busy = m;
        offers = ((wsync__host *)b)->mode != WSYNC_FABRIC_HOST_SHM ? WSYNC__HOST_CMA : 0;
        if (m->shm_fd >= 0) {
            offers |= WSYNC__HOST_SHM;
            shm_fd = m->shm_fd;
            shm_off = m->shm_off;
            shm_size = m->shm_size;
        }
    }
    pthread_mutex_unlock(&b->mu);
    if (!status && wsync__fab_authed(b, c, 0) != 0) status = WSYNC__REJ_BUSY;
    /* before the reply: the sender probes CMA as soon as it has it */
    if (!status && ((wsync__host *)b)->allow_writers && (offers & WSYNC__HOST_CMA))
        wsync__host_name_writer((wsync__host *)b, (long)cred.pid);
    if (status)
        wsync__fab_refuse(b, c, "one-host handshake refused (region %u): %s", (unsigned)region,
                          wsync__fab_rej_str(status));
    wsync__rdma_put32(rep, WSYNC__REPLY_MAGIC);
    wsync__rdma_put32(rep + 4, status);
    wsync__rdma_put32(rep + 8, offers);
    wsync__rdma_put32(rep + 12, (uint32_t)getpid());
    wsync__rdma_put64(rep + 16, shm_off);
    wsync__rdma_put64(rep + 24, shm_size);
    wsync__rdma_put64(rep + 32, 0);
    memset(&msg, 0, sizeof msg);
    iov.iov_base = rep;
    iov.iov_len = sizeof rep;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!status && want_shm && shm_fd >= 0) {
        struct cmsghdr *cmh;
        memset(&cm, 0, sizeof cm);
        msg.msg_control = cm.buf;
        msg.msg_controllen = sizeof cm.buf;
        cmh = CMSG_FIRSTHDR(&msg);
        cmh->cmsg_level = SOL_SOCKET;
        cmh->cmsg_type = SCM_RIGHTS;
        cmh->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmh), &shm_fd, sizeof(int));
    }
    if (sendmsg(c->fd, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof rep || status) return;
    for (;;) {
        uint8_t im[WSYNC__IMM_LEN];
        uint32_t why = 0;
        int rc = wsync__rdma_recv_full(c->fd, im, sizeof im, (int)b->timeout_ms, 1);
        if (rc == 0) return;
        if (rc < 0) {
            pthread_mutex_lock(&b->mu);
            b->stats.dropped++;
            pthread_mutex_unlock(&b->mu);
            return;
        }
        pthread_mutex_lock(&b->mu);
        if (wsync__rdma_get32(im) != WSYNC__IMM_MAGIC || wsync__rdma_get32(im + 12) != 0) why = WSYNC__REJ_MAGIC;
        else if (!c->busy || c->busy != m || wsync__rdma_get32(im + 4) != region) why = WSYNC__REJ_REGION;
        else {
            b->stats.frames++;
            why = (uint32_t)wsync__fab_imm_push(b, m, wsync__rdma_get32(im + 8));
        }
        pthread_mutex_unlock(&b->mu);
        if (why) {
            wsync__fab_refuse(b, c, "one-host immediate refused (region %u): %s", (unsigned)region,
                              wsync__fab_rej_str(why));
            return;
        }
    }
}

static wsync_result wsync__host_listen(wsync__host *h, wsync_error *err)
{
    struct sockaddr_un sa;
    socklen_t sl = 0;
    int fd, e;
    const char *base = getenv("XDG_RUNTIME_DIR");
    /* a directory of its own, 0700 (mkdtemp), in the user's runtime
       directory where there is one, else /tmp: other users cannot even
       connect */
    if (!base || base[0] != '/' || strlen(base) > 60) base = "/tmp";
    snprintf(h->dir, sizeof h->dir, "%s/wsync-%ld-XXXXXX", base, (long)getpid());
    if (!mkdtemp(h->dir)) {
        e = errno;
        h->dir[0] = 0;
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: cannot make a directory in %s: %s", base,
                                strerror(e));
    }
    snprintf(h->name, sizeof h->name, "%s/s", h->dir);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        e = errno;
        rmdir(h->dir);
        h->dir[0] = 0;
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: socket: %s", strerror(e));
    }
    if (wsync__host_unix_addr(h->name, &sa, &sl) == 0 && bind(fd, (struct sockaddr *)&sa, sl) == 0 &&
        listen(fd, 128) == 0)
        return wsync__fab_srv_start(&h->b, fd, err);
    e = errno;
    close(fd);
    unlink(h->name);
    rmdir(h->dir);
    h->dir[0] = 0;
    return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: cannot listen on a Unix socket: %s", strerror(e));
}

static wsync_result wsync__host_reg(void *user, void *addr, uint64_t len, wsync_mem_kind kind, wsync_fabric_mr **mr,
                                    wsync_fabric_desc *desc, wsync_error *err)
{
    wsync__host *h = (wsync__host *)user;
    struct wsync_fabric_mr *m;
    wsync__host_mem *a;
    wsync_result r;
    size_t nl;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!h || !mr || !desc) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "reg arguments");
    memset(desc, 0, sizeof *desc);
    if ((r = wsync__fab_reg_common(&h->b, addr, len, kind, &m, err)) != WSYNC_OK) return r;
    for (a = h->mem; a; a = a->next)
        if ((uint8_t *)addr >= a->ptr && wsync__rdma_in((uint64_t)((uint8_t *)addr - a->ptr), len, a->len)) {
            m->shm_fd = a->fd;
            m->shm_off = (uint64_t)((uint8_t *)addr - a->ptr);
            m->shm_size = a->len;
        }
    if (h->mode == WSYNC_FABRIC_HOST_CMA) m->shm_fd = -1;
    if (h->mode == WSYNC_FABRIC_HOST_SHM && m->shm_fd < 0 && !h->b.send_only) {
        wsync__rdma_free(&h->b.a, m);
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s",
                                "one-host SHM mode: register memory from wsync_fabric_host_alloc");
    }
    if (!h->b.send_only && !h->b.started && (r = wsync__host_listen(h, err)) != WSYNC_OK) {
        wsync__rdma_free(&h->b.a, m);
        return r;
    }
    wsync__fab_link(&h->b, m);
    desc->backend = WSYNC_FABRIC_HOST;
    desc->kind = WSYNC_MEM_HOST;
    desc->version = 1;
    desc->addr = (uint64_t)(uintptr_t)addr;
    desc->len = len;
    if (m->linked) {
        desc->flags = (h->mode != WSYNC_FABRIC_HOST_SHM ? WSYNC__HOST_CMA : 0) |
                      (m->shm_fd >= 0 ? WSYNC__HOST_SHM : 0);
        nl = strlen(h->name);
        wsync__rdma_put32(desc->bytes, (uint32_t)getpid());
        wsync__rdma_put32(desc->bytes + 4, m->id);
        wsync__rdma_put64(desc->bytes + 8, m->key);
        wsync__rdma_put64(desc->bytes + 16, (uint64_t)(uintptr_t)&h->probe);
        wsync__rdma_put64(desc->bytes + 24, m->shm_off);
        wsync__rdma_put64(desc->bytes + 32, m->shm_fd >= 0 ? m->shm_size : 0);
        desc->bytes[40] = (uint8_t)nl;
        memcpy(desc->bytes + WSYNC__HOST_DESC_FIXED, h->name, nl);
        desc->n_bytes = (uint32_t)(WSYNC__HOST_DESC_FIXED + nl);
    }
    *mr = m;
    return WSYNC_OK;
}

/* process_vm_writev of all len bytes (it may stop short at a page it cannot reach). */
static int wsync__host_cma(int pid, const uint8_t *src, uint64_t addr, uint64_t len)
{
    while (len) {
        struct iovec l, rm;
        ssize_t n;
        size_t step = len > (1ull << 30) ? (size_t)(1ull << 30) : (size_t)len;
        l.iov_base = (void *)(uintptr_t)src;
        l.iov_len = step;
        rm.iov_base = (void *)(uintptr_t)addr;
        rm.iov_len = step;
        n = process_vm_writev((pid_t)pid, &l, 1, &rm, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) {
            errno = EFAULT;
            return -1;
        }
        src += n;
        addr += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

static void wsync__host_cma_why(int e, int pid, char *why, size_t cap)
{
    char scope[16] = "";
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f) {
        if (!fgets(scope, sizeof scope, f)) scope[0] = 0;
        fclose(f);
        scope[strcspn(scope, "\n")] = 0;
    }
    if (e == EPERM || e == EACCES)
        snprintf(why, cap,
                 "process_vm_writev into pid %d not permitted (%s): Yama ptrace_scope %s; the receiver may "
                 "set allow_any_writer, or run both as one uid with ptrace_scope 0 or CAP_SYS_PTRACE, or "
                 "register memory from wsync_fabric_host_alloc for SHM mode",
                 pid, strerror(e), scope[0] ? scope : "absent");
    else if (e == ENOSYS)
        snprintf(why, cap, "process_vm_writev is not available (ENOSYS: a seccomp filter in a container, or "
                           "a kernel without CONFIG_CROSS_MEMORY_ATTACH); use SHM mode");
    else
        snprintf(why, cap, "process_vm_writev into pid %d: %s", pid, strerror(e));
}

WSYNC_DEF int wsync_fabric_host_cma_allowed(int pid, const void *addr, char *why, size_t why_cap)
{
    uint64_t v = 0;
    struct iovec l, rm;
    l.iov_base = &v;
    l.iov_len = sizeof v;
    rm.iov_base = (void *)(uintptr_t)addr;
    rm.iov_len = sizeof v;
    if (process_vm_readv((pid_t)pid, &l, 1, &rm, 1, 0) != (ssize_t)sizeof v ||
        process_vm_writev((pid_t)pid, &l, 1, &rm, 1, 0) != (ssize_t)sizeof v) {
        if (why && why_cap) wsync__host_cma_why(errno, pid, why, why_cap);
        return 0;
    }
    if (why && why_cap) why[0] = 0;
    return 1;
}

/* The handshake: connect, check the peer's pid, send region and key, read
   the reply (and the memfd when asked for SHM). */
static wsync_result wsync__host_hello(wsync__host *h, struct wsync_fabric_remote *r, const char *name, int want_shm,
                                      uint32_t *offers, int *peer_pid, int *shm_fd, uint64_t *shm_off,
                                      uint64_t *shm_size, wsync_error *err)
{
    struct sockaddr_un sa;
    socklen_t sl = 0;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    uint8_t hello[WSYNC__HELLO_LEN], rep[WSYNC__REPLY_LEN];
    struct msghdr msg;
    struct iovec iov;
    struct cmsghdr *cmh;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    ssize_t n;
    struct pollfd pf;
    *shm_fd = -1;
    r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->fd < 0) return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: socket: %s", strerror(errno));
    wsync__rdma_set_timeouts(r->fd, h->b.timeout_ms);
    if (wsync__host_unix_addr(name, &sa, &sl) != 0 || connect(r->fd, (struct sockaddr *)&sa, sl) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: cannot reach %s: %s (has it exited?)", r->peer,
                                strerror(errno));
    if (getsockopt(r->fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: SO_PEERCRED: %s", strerror(errno));
    if (!wsync__host_uid_ok(cred.uid)) /* whoever bound the name first is not the receiver we want */
        return wsync_error_set(err, WSYNC_ERR_IO,
                                "one-host fabric: %s runs as uid %lu, not this user (%lu) or root: refused",
                                r->peer, (unsigned long)cred.uid, (unsigned long)geteuid());
    *peer_pid = (int)cred.pid;
    memset(hello, 0, sizeof hello);
    wsync__rdma_put32(hello, WSYNC__HELLO_MAGIC);
    wsync__rdma_put32(hello + 4, r->region);
    wsync__rdma_put64(hello + 8, r->key);
    wsync__rdma_put32(hello + 16, (uint32_t)want_shm);
    wsync__rdma_put32(hello + 20, (uint32_t)getpid());
    if (wsync__rdma_send_all(r->fd, hello, sizeof hello, 0) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: handshake with %s: %s", r->peer, strerror(errno));
    pf.fd = r->fd;
    pf.events = POLLIN;
    pf.revents = 0;
    if (poll(&pf, 1, (int)h->b.timeout_ms) <= 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: no handshake reply from %s within %u ms", r->peer,
                                h->b.timeout_ms);
    memset(&msg, 0, sizeof msg);
    memset(&cm, 0, sizeof cm);
    iov.iov_base = rep;
    iov.iov_len = sizeof rep;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cm.buf;
    msg.msg_controllen = sizeof cm.buf;
    n = recvmsg(r->fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    for (cmh = CMSG_FIRSTHDR(&msg); cmh; cmh = CMSG_NXTHDR(&msg, cmh))
        if (cmh->cmsg_level == SOL_SOCKET && cmh->cmsg_type == SCM_RIGHTS && cmh->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(shm_fd, CMSG_DATA(cmh), sizeof(int));
    if (n != (ssize_t)sizeof rep || wsync__rdma_get32(rep) != WSYNC__REPLY_MAGIC)
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: bad handshake reply from %s", r->peer);
    if (wsync__rdma_get32(rep + 4) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: %s refused the handshake: %s", r->peer,
                                wsync__fab_rej_str(wsync__rdma_get32(rep + 4)));
    *offers = wsync__rdma_get32(rep + 8);
    *shm_off = wsync__rdma_get64(rep + 16);
    *shm_size = wsync__rdma_get64(rep + 24);
    return WSYNC_OK;
}

static wsync_result wsync__host_map(wsync__host *h, struct wsync_fabric_remote *r, int fd, uint64_t off,
                                    uint64_t size, wsync_error *err)
{
    struct stat st;
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t base;
    void *p;
    (void)h;
    if (fd < 0) return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: %s sent no shared memory", r->peer);
    if (pg <= 0) pg = 4096;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < size || !wsync__rdma_in(off, r->len, size))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "one-host fabric: %s's shared memory is smaller than the region",
                                r->peer);
    base = off - off % (uint64_t)pg;
    r->map_delta = (size_t)(off - base);
    r->map_len = (size_t)(r->len + r->map_delta);
    /* populated now, so the first step pays no page faults */
    p = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, (off_t)base);
    if (p == MAP_FAILED) {
        r->map_len = 0;
        return wsync_error_set(err, WSYNC_ERR_IO, "one-host fabric: mapping %s's memory: %s", r->peer,
                                strerror(errno));
    }
    r->map = (uint8_t *)p;
    return WSYNC_OK;
}

static wsync_result wsync__host_open_remote(void *user, const wsync_fabric_desc *d, wsync_fabric_remote **out,
                                            wsync_error *err)
{
    wsync__host *h = (wsync__host *)user;
    struct wsync_fabric_remote *r;
    char name[WSYNC__HOST_NAME_MAX + 1], why[384];
    unsigned nl;
    uint32_t offers = 0;
    int peer_pid = 0, shm_fd = -1, want_shm, try_cma;
    uint64_t shm_off = 0, shm_size = 0, probe;
    wsync_result res;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!h || !d || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "open_remote arguments");
    *out = NULL;
    if (d->backend != WSYNC_FABRIC_HOST || d->version != 1 || d->kind != WSYNC_MEM_HOST)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "not a one-host fabric descriptor (backend %u, version %u, kind %u)",
                                (unsigned)d->backend, (unsigned)d->version, (unsigned)d->kind);
    nl = d->n_bytes > WSYNC__HOST_DESC_FIXED ? d->bytes[40] : 0;
    if (nl == 0 || nl > WSYNC__HOST_NAME_MAX || d->n_bytes != WSYNC__HOST_DESC_FIXED + nl || d->len == 0 ||
        d->flags == 0 || (d->flags & ~(WSYNC__HOST_CMA | WSYNC__HOST_SHM)) != 0)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s",
                                "one-host descriptor: malformed (a send-only fabric's?)");
    memcpy(name, d->bytes + WSYNC__HOST_DESC_FIXED, nl);
    name[nl] = 0;
    if (strlen(name) != nl || name[0] != '/')
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s",
                                "one-host descriptor: the socket is not a path (a NUL in it, or an older "
                                "version's abstract name)");
    want_shm = (d->flags & WSYNC__HOST_SHM) && h->mode != WSYNC_FABRIC_HOST_CMA;
    try_cma = (d->flags & WSYNC__HOST_CMA) && h->mode != WSYNC_FABRIC_HOST_SHM;
    if (!want_shm && !try_cma)
        return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "one-host fabric: the region offers %s, this sender takes %s only",
                                d->flags & WSYNC__HOST_CMA ? "CMA" : "SHM",
                                h->mode == WSYNC_FABRIC_HOST_CMA ? "CMA" : "SHM");
    r = (struct wsync_fabric_remote *)wsync__rdma_alloc(&h->b.a, sizeof *r);
    if (!r) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "open_remote");
    r->backend = WSYNC_FABRIC_HOST;
    r->fd = -1;
    r->pid = (int)wsync__rdma_get32(d->bytes);
    r->region = wsync__rdma_get32(d->bytes + 4);
    r->key = wsync__rdma_get64(d->bytes + 8);
    probe = wsync__rdma_get64(d->bytes + 16);
    r->addr = d->addr;
    r->len = d->len;
    snprintf(r->peer, sizeof r->peer, "pid %d", r->pid);
    res = wsync__host_hello(h, r, name, want_shm, &offers, &peer_pid, &shm_fd, &shm_off, &shm_size, err);
    if (res != WSYNC_OK) goto fail;
    why[0] = 0;
    if (try_cma && !(offers & WSYNC__HOST_CMA)) {
        try_cma = 0;
        snprintf(why, sizeof why, "%s", "the receiver does not offer CMA");
    }
    if (try_cma && peer_pid != r->pid) {
        try_cma = 0;
        snprintf(why, sizeof why, "the receiver is pid %d in its namespace, %d in ours (another pid namespace)", r->pid,
                 peer_pid);
    }
    if (try_cma) {
        uint64_t v = (uint64_t)getpid();
        if (wsync__host_cma(r->pid, (const uint8_t *)&v, probe, sizeof v) == 0) {
            r->mode = WSYNC_FABRIC_HOST_CMA;
        } else {
            wsync__host_cma_why(errno, r->pid, why, sizeof why);
        }
    }
    if (r->mode != WSYNC_FABRIC_HOST_CMA) {
        if (!want_shm || !(offers & WSYNC__HOST_SHM)) {
            res = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "one-host fabric: %s region %u: %s%s", r->peer,
                                   (unsigned)r->region, why[0] ? why : "no mode in common",
                                   d->flags & WSYNC__HOST_SHM ? "" : " (and the region offers no SHM)");
            goto fail;
        }
        if ((res = wsync__host_map(h, r, shm_fd, shm_off, shm_size, err)) != WSYNC_OK) goto fail;
        r->mode = WSYNC_FABRIC_HOST_SHM;
    }
    if (shm_fd >= 0) close(shm_fd);
    r->next = h->b.remotes;
    h->b.remotes = r;
    *out = r;
    return WSYNC_OK;
fail:
    if (shm_fd >= 0) close(shm_fd);
    if (r->fd >= 0) close(r->fd);
    wsync__rdma_free(&h->b.a, r);
    return res;
}

static wsync_result wsync__host_send(wsync__host *h, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                     uint64_t dst_off, uint64_t len, int with_imm, uint32_t imm, wsync_error *err)
{
    wsync_result r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if ((r = wsync__fab_check_write(h ? &h->b : NULL, src, src_off, dst, dst_off, len, err)) != WSYNC_OK) return r;
    /* a closed socket means the receiver exited or deregistered: its memory is not the region any more */
    if (wsync__rdma_peer_gone(dst->fd))
        return wsync__fab_break(dst, err, "%s",
                                "the receiver closed the connection (exited, or deregistered the region)");
    if (len) {
        if (dst->mode == WSYNC_FABRIC_HOST_SHM) {
            memcpy(dst->map + dst->map_delta + dst_off, src->addr + src_off, (size_t)len);
        } else if (wsync__host_cma(dst->pid, src->addr + src_off, dst->addr + dst_off, len) != 0) {
            char why[384];
            wsync__host_cma_why(errno, dst->pid, why, sizeof why);
            return wsync__fab_break(dst, err, "%s", why);
        }
    }
    if (with_imm) {
        uint8_t im[WSYNC__IMM_LEN];
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        wsync__rdma_put32(im, WSYNC__IMM_MAGIC);
        wsync__rdma_put32(im + 4, dst->region);
        wsync__rdma_put32(im + 8, imm);
        wsync__rdma_put32(im + 12, 0);
        if (wsync__rdma_send_all(dst->fd, im, sizeof im, 0) != 0)
            return wsync__fab_break(dst, err, "sending an immediate: %s", strerror(errno));
    }
    return WSYNC_OK;
}

static wsync_result wsync__host_write(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                      uint64_t dst_off, uint64_t len, wsync_error *err)
{
    return wsync__host_send((wsync__host *)user, src, src_off, dst, dst_off, len, 0, 0, err);
}

static wsync_result wsync__host_write_imm(void *user, wsync_fabric_mr *src, uint64_t src_off,
                                          wsync_fabric_remote *dst, uint64_t dst_off, uint64_t len, uint32_t imm,
                                          wsync_error *err)
{
    return wsync__host_send((wsync__host *)user, src, src_off, dst, dst_off, len, 1, imm, err);
}

/* The writes are done when they return; what is left is ordering, and
   telling the caller when a receiver went away under them. */
static wsync_result wsync__host_flush(void *user, wsync_error *err)
{
    wsync__host *h = (wsync__host *)user;
    struct wsync_fabric_remote *r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!h) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "flush arguments");
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (r = h->b.remotes; r; r = r->next)
        if (!r->broken && wsync__rdma_peer_gone(r->fd))
            wsync__fab_break(r, NULL, "%s", "the receiver closed the connection (exited, or deregistered the region)");
    for (r = h->b.remotes; r; r = r->next)
        if (r->broken)
            return wsync_error_set(err, WSYNC_ERR_IO, "flush: %s region %u: %s", r->peer, (unsigned)r->region, r->why);
    return WSYNC_OK;
}

static void wsync__host_close(void *user)
{
    wsync__host *h = (wsync__host *)user;
    wsync_allocator a;
    if (!h) return;
    a = h->b.a;
    wsync__fab_base_close(&h->b);
    if (h->dir[0]) {
        unlink(h->name);
        rmdir(h->dir);
    }
    while (h->mem) {
        wsync__host_mem *m = h->mem;
        h->mem = m->next;
        munmap(m->ptr, (size_t)m->len);
        close(m->fd);
        wsync__rdma_free(&a, m);
    }
    wsync__rdma_free(&a, h);
}

WSYNC_DEF wsync_result wsync_fabric_host_open(const wsync_fabric_host_options *opt, wsync_fabric *out,
                                              wsync_error *err)
{
    wsync_fabric_host_options o;
    wsync__host *h;
    wsync_result r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "host_open arguments");
    memset(out, 0, sizeof *out);
    if (opt) o = *opt;
    else memset(&o, 0, sizeof o);
    if (o.mode != WSYNC_FABRIC_HOST_AUTO && o.mode != WSYNC_FABRIC_HOST_CMA && o.mode != WSYNC_FABRIC_HOST_SHM)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "one-host fabric: unknown mode %d", (int)o.mode);
    h = (wsync__host *)wsync__rdma_alloc(&o.allocator, sizeof *h);
    if (!h) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "host_open");
    if ((r = wsync__fab_base_init(&h->b, WSYNC_FABRIC_HOST, &o.allocator, err)) != WSYNC_OK) {
        wsync__rdma_free(&o.allocator, h);
        return r;
    }
    h->b.serve = wsync__host_serve;
    h->b.timeout_ms = o.timeout_ms ? o.timeout_ms : 5000;
    h->b.max_conns = 1024;
    h->b.send_only = o.send_only;
    h->mode = o.mode;
    h->allow_writers = o.allow_any_writer;
#if defined(PR_SET_PTRACER)
    if (o.writer_pid > 1 && prctl(PR_SET_PTRACER, (unsigned long)o.writer_pid, 0, 0, 0) == 0) h->ptracer = o.writer_pid;
#endif
    out->user = h;
    out->backend = WSYNC_FABRIC_HOST;
    out->reg = wsync__host_reg;
    out->dereg = wsync__fab_dereg;
    out->open_remote = wsync__host_open_remote;
    out->close_remote = wsync__fab_close_remote;
    out->write = wsync__host_write;
    out->write_imm = wsync__host_write_imm;
    out->recv_imm = wsync__fab_recv_imm;
    out->flush = wsync__host_flush;
    out->close = wsync__host_close;
    return WSYNC_OK;
}

static int wsync__host_memfd(void)
{
#ifdef MFD_CLOEXEC
    int fd = memfd_create("wsync-fabric", MFD_CLOEXEC);
    if (fd >= 0 || errno != ENOSYS) return fd;
#endif
    {
        char name[64];
        int fd2, tries;
        for (tries = 0; tries < 8; tries++) {
            snprintf(name, sizeof name, "/wsync-%ld-%016llx", (long)getpid(),
                     (unsigned long long)wsync__rdma_random64());
            fd2 = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (fd2 >= 0) {
                shm_unlink(name);
                return fd2;
            }
            if (errno != EEXIST) break;
        }
        return -1;
    }
}

WSYNC_DEF wsync_result wsync_fabric_host_alloc(wsync_fabric *f, uint64_t len, void **ptr, wsync_error *err)
{
    wsync__host *h;
    wsync__host_mem *m;
    void *p;
    int fd;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (ptr) *ptr = NULL;
    if (!f || f->backend != WSYNC_FABRIC_HOST || !f->user || !ptr || len == 0)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "host_alloc: a one-host fabric, a length, a pointer");
    if (len > (uint64_t)(SIZE_MAX / 2) || len > (uint64_t)INT64_MAX)
        return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "%s", "host_alloc: too large");
    h = (wsync__host *)f->user;
    fd = wsync__host_memfd();
    if (fd < 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "host_alloc: memfd_create and shm_open: %s", strerror(errno));
    if (ftruncate(fd, (off_t)len) != 0) {
        int e = errno;
        close(fd);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "host_alloc: %llu bytes: %s", (unsigned long long)len,
                                strerror(e));
    }
    p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    m = (wsync__host_mem *)wsync__rdma_alloc(&h->b.a, sizeof *m);
    if (p == MAP_FAILED || !m) {
        if (p != MAP_FAILED) munmap(p, (size_t)len);
        close(fd);
        wsync__rdma_free(&h->b.a, m);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "host_alloc: mapping %llu bytes",
                                (unsigned long long)len);
    }
    m->ptr = (uint8_t *)p;
    m->len = len;
    m->fd = fd;
    m->next = h->mem;
    h->mem = m;
    *ptr = p;
    return WSYNC_OK;
}

WSYNC_DEF void wsync_fabric_host_free(wsync_fabric *f, void *ptr)
{
    wsync__host *h;
    wsync__host_mem **pp, *m;
    if (!f || f->backend != WSYNC_FABRIC_HOST || !f->user || !ptr) return;
    h = (wsync__host *)f->user;
    for (pp = &h->mem; (m = *pp) != NULL; pp = &m->next)
        if (m->ptr == (uint8_t *)ptr) {
            *pp = m->next;
            munmap(m->ptr, (size_t)m->len);
            close(m->fd);
            wsync__rdma_free(&h->b.a, m);
            return;
        }
}

WSYNC_DEF wsync_fabric_host_mode wsync_fabric_host_remote_mode(const wsync_fabric *f,
                                                               const wsync_fabric_remote *r)
{
    if (!f || f->backend != WSYNC_FABRIC_HOST || !r || r->backend != WSYNC_FABRIC_HOST) return WSYNC_FABRIC_HOST_AUTO;
    return (wsync_fabric_host_mode)r->mode;
}


/* ---------------------------------------------------------------------
   ibverbs (RDMA RC)  >>fabric-verbs
   ---------------------------------------------------------------------
   Never run on a NIC: tested only against tests/rdma/fake_verbs.h. */
#if WSYNC__HAVE_VERBS

#define WSYNC__VB_HELLO_MAGIC 0x31565357u /* "WSV1" */
#define WSYNC__VB_REPLY_MAGIC 0x32565357u /* "WSV2" */
#define WSYNC__VB_VERSION 1u
#define WSYNC__VB_HDR 32
#define WSYNC__VB_LANE 40
#define WSYNC__VB_DESC_FIXED 24
#define WSYNC__VB_GID_SCAN 256        /* GID table entries looked at, at most */

/* Why a receiver refused a handshake (the reply's status). */
enum {
    WSYNC__VREJ_MAGIC = 1,
    WSYNC__VREJ_VERSION = 2,
    WSYNC__VREJ_LENGTH = 3,
    WSYNC__VREJ_REGION = 4,
    WSYNC__VREJ_KEY = 5,
    WSYNC__VREJ_LANE = 6,
    WSYNC__VREJ_VERBS = 7,
    WSYNC__VREJ_BUSY = 8
};

static const char *wsync__vrej_str(uint32_t s)
{
    switch (s) {
    case WSYNC__VREJ_MAGIC: return "not a verbs handshake (magic)";
    case WSYNC__VREJ_VERSION: return "unsupported handshake version";
    case WSYNC__VREJ_LENGTH: return "handshake length or lane count out of range";
    case WSYNC__VREJ_REGION: return "unknown region (never registered, or deregistered)";
    case WSYNC__VREJ_KEY: return "wrong key";
    case WSYNC__VREJ_LANE: return "a lane's NIC, queue pair number, PSN, MTU or address is invalid, or the link "
                                  "layers differ (InfiniBand and RoCE)";
    case WSYNC__VREJ_VERBS: return "the receiver could not set up its queue pairs";
    case WSYNC__VREJ_BUSY: return "too many connections";
    default: return "unknown reason";
    }
}

static const char *wsync__vwc_name(int s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS (success)";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR (local length error)";
    case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR (local QP operation error)";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR (local protection error)";
    case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR (work request flushed)";
    case IBV_WC_BAD_RESP_ERR: return "IBV_WC_BAD_RESP_ERR (bad response)";
    case IBV_WC_LOC_ACCESS_ERR: return "IBV_WC_LOC_ACCESS_ERR (local access error)";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR (remote invalid request)";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR (remote access error: rkey, bounds or access flags)";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR (remote operation error)";
    case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded: peer unreachable)";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR (receiver not ready: no receive posted)";
    case IBV_WC_REM_ABORT_ERR: return "IBV_WC_REM_ABORT_ERR (remote aborted)";
    case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR (fatal error)";
    case IBV_WC_RESP_TIMEOUT_ERR: return "IBV_WC_RESP_TIMEOUT_ERR (response timeout)";
    case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR (general error)";
    default: return "an unknown completion status";
    }
}

/* ---- the default table: libibverbs, loaded at run time --------------
   dlopen keeps libibverbs out of the link line of every program that
   includes this header; the library stays loaded once found. */

typedef struct wsync__vlib {
    int ok;
    char why[256];
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    const char *(*get_device_name)(struct ibv_device *);
    struct ibv_context *(*open_device)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
    int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    int (*dealloc_pd)(struct ibv_pd *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
    int (*destroy_cq)(struct ibv_cq *);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*destroy_qp)(struct ibv_qp *);
    const char *(*wc_status_str)(enum ibv_wc_status);
} wsync__vlib;

static wsync__vlib wsync__vlib_g;
static pthread_once_t wsync__vlib_once = PTHREAD_ONCE_INIT;

/* POSIX guarantees a function pointer fits a void *; the copy avoids the
   cast ISO C forbids. */
static int wsync__vsym(void *h, const char *name, void *fp)
{
    void *p = dlsym(h, name);
    if (!p) {
        snprintf(wsync__vlib_g.why, sizeof wsync__vlib_g.why, "libibverbs.so.1 has no %s", name);
        return 0;
    }
    memcpy(fp, &p, sizeof p);
    return 1;
}

static void wsync__vlib_load(void)
{
    wsync__vlib *g = &wsync__vlib_g;
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *e;
    if (!h) {
        e = dlerror();
        snprintf(g->why, sizeof g->why, "libibverbs not found (dlopen libibverbs.so.1: %s)", e ? e : "?");
        return;
    }
    /* ibv_reg_mr and ibv_query_port are macros in verbs.h over exported
       functions of these names: the exported ones are what dlsym finds.
       The exported query_port fills the compatible prefix of
       ibv_port_attr, which holds every field used here. */
    g->ok = wsync__vsym(h, "ibv_get_device_list", &g->get_device_list) &&
            wsync__vsym(h, "ibv_free_device_list", &g->free_device_list) &&
            wsync__vsym(h, "ibv_get_device_name", &g->get_device_name) &&
            wsync__vsym(h, "ibv_open_device", &g->open_device) &&
            wsync__vsym(h, "ibv_close_device", &g->close_device) &&
            wsync__vsym(h, "ibv_query_device", &g->query_device) &&
            wsync__vsym(h, "ibv_query_port", &g->query_port) &&
            wsync__vsym(h, "ibv_query_gid", &g->query_gid) &&
            wsync__vsym(h, "ibv_alloc_pd", &g->alloc_pd) &&
            wsync__vsym(h, "ibv_dealloc_pd", &g->dealloc_pd) &&
            wsync__vsym(h, "ibv_reg_mr", &g->reg_mr) &&
            wsync__vsym(h, "ibv_dereg_mr", &g->dereg_mr) &&
            wsync__vsym(h, "ibv_create_cq", &g->create_cq) &&
            wsync__vsym(h, "ibv_destroy_cq", &g->destroy_cq) &&
            wsync__vsym(h, "ibv_create_qp", &g->create_qp) &&
            wsync__vsym(h, "ibv_modify_qp", &g->modify_qp) &&
            wsync__vsym(h, "ibv_destroy_qp", &g->destroy_qp) &&
            wsync__vsym(h, "ibv_wc_status_str", &g->wc_status_str);
}

static struct ibv_device **wsync__vd_get_device_list(void *user, int *n)
{
    (void)user;
    return wsync__vlib_g.get_device_list(n);
}
static int wsync__vd_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    memset(a, 0, sizeof *a); /* the exported function fills a prefix only */
    return wsync__vlib_g.query_port(c, port, a);
}
/* post_send, post_recv and poll_cq are inline in verbs.h: calls through
   the context's ops, no symbol to link. */
static int wsync__vd_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return ibv_post_send(qp, wr, bad);
}
static int wsync__vd_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return ibv_post_recv(qp, wr, bad);
}
static int wsync__vd_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    return ibv_poll_cq(cq, n, wc);
}
static const char *wsync__vd_wc_status_str(int s)
{
    return wsync__vlib_g.wc_status_str((enum ibv_wc_status)s);
}

static wsync_result wsync__vops_default(wsync_verbs_ops *o, wsync_error *err)
{
    const wsync__vlib *g = &wsync__vlib_g;
    pthread_once(&wsync__vlib_once, wsync__vlib_load);
    if (!g->ok) return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s", g->why);
    memset(o, 0, sizeof *o);
    o->get_device_list = wsync__vd_get_device_list;
    o->free_device_list = g->free_device_list;
    o->get_device_name = g->get_device_name;
    o->open_device = g->open_device;
    o->close_device = g->close_device;
    o->query_device = g->query_device;
    o->query_port = wsync__vd_query_port;
    o->query_gid = g->query_gid;
    o->alloc_pd = g->alloc_pd;
    o->dealloc_pd = g->dealloc_pd;
    o->reg_mr = g->reg_mr;
    o->dereg_mr = g->dereg_mr;
    o->create_cq = g->create_cq;
    o->destroy_cq = g->destroy_cq;
    o->create_qp = g->create_qp;
    o->modify_qp = g->modify_qp;
    o->destroy_qp = g->destroy_qp;
    o->post_send = wsync__vd_post_send;
    o->post_recv = wsync__vd_post_recv;
    o->poll_cq = wsync__vd_poll_cq;
    o->wc_status_str = wsync__vd_wc_status_str;
    return WSYNC_OK;
}

/* ---- state ---------------------------------------------------------- */

typedef struct wsync__vnic {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    uint8_t port, ethernet, mtu;
    uint16_t lid;
    int gid_index;
    uint8_t gid[16];
    uint32_t max_msg;
    char name[72];
    uint64_t bytes, wrs;
} wsync__vnic;

typedef struct wsync__vb {
    wsync__tcp t;              /* first: the control listener is the TCP backend's; t.b is the wsync__fab_base */
    wsync_verbs_ops ops;
    unsigned n_nics;
    wsync__vnic nic[WSYNC_VERBS_MAX_NICS];
    unsigned sq_depth, signal_every, rq_depth;
    uint64_t split_min;
    uint32_t max_wr;
    uint64_t instance;         /* tells this fabric's descriptors from a restarted one's */
    wsync_fabric_verbs_stats st;
} wsync__vb;

/* A source or region: its registration on every NIC. */
typedef struct wsync__vmr {
    struct ibv_mr *mr[WSYNC_VERBS_MAX_NICS];
} wsync__vmr;

/* One queue pair of a remote (sender side). Completions are asked for by
   selected requests only; a completion retires every request before it,
   so `done` is the count of requests known finished. */
typedef struct wsync__vlane {
    wsync__vnic *nic;
    unsigned nic_i;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint32_t rkey, max_msg;
    uint64_t posted, done, last_sig, since_sig;
} wsync__vlane;

typedef struct wsync__vrem {
    unsigned n, rr;
    wsync__vlane lane[WSYNC_VERBS_MAX_NICS];
} wsync__vrem;

/* One side of a lane, as the handshake carries it. */
typedef struct wsync__vend {
    uint32_t nic, qpn, psn, max_msg;
    uint16_t lid;
    uint8_t ethernet, mtu, port;
    uint8_t gid[16];
} wsync__vend;

static void wsync__vend_put(uint8_t *p, const wsync__vend *e)
{
    memset(p, 0, WSYNC__VB_LANE);
    wsync__rdma_put32(p, e->nic);
    wsync__rdma_put32(p + 4, e->qpn);
    wsync__rdma_put32(p + 8, e->psn);
    wsync__rdma_put32(p + 12, e->max_msg);
    p[16] = (uint8_t)e->lid;
    p[17] = (uint8_t)(e->lid >> 8);
    p[18] = e->ethernet;
    p[19] = e->mtu;
    p[20] = e->port;
    memcpy(p + 24, e->gid, 16);
}

static void wsync__vend_get(const uint8_t *p, wsync__vend *e)
{
    e->nic = wsync__rdma_get32(p);
    e->qpn = wsync__rdma_get32(p + 4);
    e->psn = wsync__rdma_get32(p + 8);
    e->max_msg = wsync__rdma_get32(p + 12);
    e->lid = (uint16_t)(p[16] | p[17] << 8);
    e->ethernet = p[18];
    e->mtu = p[19];
    e->port = p[20];
    memcpy(e->gid, p + 24, 16);
}

static int wsync__vzero16(const uint8_t *g)
{
    int i;
    for (i = 0; i < 16; i++)
        if (g[i]) return 0;
    return 1;
}

/* A peer's lane, hostile until checked: 0 when usable against `local`. */
static int wsync__vend_bad(const wsync__vend *e, const wsync__vnic *local, const uint8_t *raw)
{
    if (e->qpn == 0 || e->qpn > 0xFFFFFFu || e->psn > 0xFFFFFFu || e->max_msg == 0) return 1;
    if (e->mtu < IBV_MTU_256 || e->mtu > IBV_MTU_4096 || e->ethernet > 1 || e->ethernet != local->ethernet) return 1;
    if (raw[21] || raw[22] || raw[23]) return 1;
    if (e->ethernet ? wsync__vzero16(e->gid) : e->lid == 0) return 1;
    return 0;
}

static wsync__vend wsync__vend_of(const wsync__vnic *n, uint32_t nic_index, struct ibv_qp *qp, uint32_t psn)
{
    wsync__vend e;
    memset(&e, 0, sizeof e);
    e.nic = nic_index;
    e.qpn = qp->qp_num;
    e.psn = psn;
    e.max_msg = n->max_msg;
    e.lid = n->lid;
    e.ethernet = n->ethernet;
    e.mtu = n->mtu;
    e.port = n->port;
    memcpy(e.gid, n->gid, 16);
    return e;
}

/* ---- NICs ------------------------------------------------------------ */

/* RoCE: the configured GID, else the first IPv4-mapped one (RoCE v2 over
   IPv4 on the usual setups), else the first non-zero one. */
static wsync_result wsync__vnic_gid(wsync__vb *v, wsync__vnic *n, int gid_len, int use_index, int index,
                                    wsync_error *err)
{
    union ibv_gid g;
    int i, first = -1;
    if (!n->ethernet || use_index) {
        i = n->ethernet ? index : 0;
        if (i < 0 || (gid_len > 0 && i >= gid_len))
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs fabric: %s: GID index %d outside the table (%d)",
                                    n->name, i, gid_len);
        if (v->ops.query_gid(n->ctx, n->port, i, &g) != 0)
            return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_query_gid(%s, %d): %s", n->name, i,
                                    strerror(errno));
        if (n->ethernet && wsync__vzero16(g.raw))
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs fabric: %s: GID %d is empty", n->name, i);
        n->gid_index = i;
        memcpy(n->gid, g.raw, 16);
        return WSYNC_OK;
    }
    for (i = 0; i < gid_len && i < WSYNC__VB_GID_SCAN; i++) {
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (v->ops.query_gid(n->ctx, n->port, i, &g) != 0 || wsync__vzero16(g.raw)) continue;
        if (memcmp(g.raw, v4, 12) == 0) {
            first = i;
            break;
        }
        if (first < 0) first = i;
    }
    if (first < 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s: RoCE port without a GID (no IP address?)",
                                n->name);
    return wsync__vnic_gid(v, n, gid_len, 1, first, err);
}

/* Opens one NIC: device, port (0: its first active one from `from` on), GID, PD.
   1: opened; 0: no active port (not an error when picking any);
   -1: failed, err says why. */
static int wsync__vnic_open(wsync__vb *v, struct ibv_device *dev, unsigned port, unsigned from, int use_gid,
                            int gid_index, wsync__vnic *n, wsync_error *err)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    const char *dn = v->ops.get_device_name(dev);
    unsigned p, last;
    memset(n, 0, sizeof *n);
    if (!dn) dn = "?";
    n->ctx = v->ops.open_device(dev);
    if (!n->ctx) {
        wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_open_device(%s): %s", dn,
                         strerror(errno ? errno : ENODEV));
        return -1;
    }
    memset(&da, 0, sizeof da);
    if (v->ops.query_device(n->ctx, &da) != 0) {
        wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_query_device(%s): %s", dn, strerror(errno));
        goto fail;
    }
    last = port ? port : da.phys_port_cnt;
    for (p = port ? port : from; p <= last; p++) {
        if (v->ops.query_port(n->ctx, (uint8_t)p, &pa) != 0) {
            if (!port) continue;
            wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_query_port(%s, %u): %s", dn, p, strerror(errno));
            goto fail;
        }
        if (pa.state == IBV_PORT_ACTIVE) break;
        if (port) {
            wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s port %u is not active (state %d)", dn, p,
                             (int)pa.state);
            goto fail;
        }
    }
    if (p > last || p > 255) {
        v->ops.close_device(n->ctx);
        n->ctx = NULL;
        return 0;
    }
    n->port = (uint8_t)p;
    n->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    n->mtu = (uint8_t)pa.active_mtu;
    n->lid = pa.lid;
    n->max_msg = pa.max_msg_sz ? pa.max_msg_sz : (1u << 31);
    snprintf(n->name, sizeof n->name, "%.63s:%u", dn, p);
    if (n->mtu < IBV_MTU_256 || n->mtu > IBV_MTU_4096) n->mtu = IBV_MTU_1024;
    if (!n->ethernet && n->lid == 0) {
        wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s: InfiniBand port without a LID (no subnet manager?)", n->name);
        goto fail;
    }
    if (wsync__vnic_gid(v, n, pa.gid_tbl_len, use_gid, gid_index, err) != WSYNC_OK) goto fail;
    n->pd = v->ops.alloc_pd(n->ctx);
    if (!n->pd) {
        wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_alloc_pd(%s): %s", n->name, strerror(errno ? errno : ENOMEM));
        goto fail;
    }
    return 1;
fail:
    v->ops.close_device(n->ctx);
    n->ctx = NULL;
    return -1;
}

static void wsync__vnic_close(wsync__vb *v, wsync__vnic *n)
{
    if (n->pd) v->ops.dealloc_pd(n->pd);
    if (n->ctx) v->ops.close_device(n->ctx);
    n->pd = NULL;
    n->ctx = NULL;
}

/* One entry of options.devices ("name" or "name:port"). */
static wsync_result wsync__vnic_named(wsync__vb *v, struct ibv_device **list, int nd, const char *tok, size_t tl,
                                      int use_gid, int gid_index, wsync_error *err)
{
    char name[72], *colon, *end;
    unsigned long port = 0;
    int i, rc;
    if (tl == 0 || tl >= sizeof name)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs fabric: bad device name in options.devices");
    memcpy(name, tok, tl);
    name[tl] = 0;
    colon = strchr(name, ':');
    if (colon) {
        *colon = 0;
        port = strtoul(colon + 1, &end, 10);
        if (*end || port == 0 || port > 255)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs fabric: bad port in '%s'", tok);
    }
    if (v->n_nics == WSYNC_VERBS_MAX_NICS)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "verbs fabric: more than %d NICs", WSYNC_VERBS_MAX_NICS);
    for (i = 0; i < nd; i++) {
        const char *dn = v->ops.get_device_name(list[i]);
        if (!dn || strcmp(dn, name) != 0) continue;
        rc = wsync__vnic_open(v, list[i], (unsigned)port, 1, use_gid, gid_index, &v->nic[v->n_nics], err);
        if (rc < 0) return err ? err->code : WSYNC_ERR_IO;
        if (rc == 0) return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s has no active port", name);
        v->n_nics++;
        return WSYNC_OK;
    }
    return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: no RDMA device named '%s' (%d devices)", name, nd);
}

/* Every active port of every device ("all"), or the first one (NULL).
   A device that fails to open is passed over; its error is reported when
   no NIC is left. */
static wsync_result wsync__vnic_any(wsync__vb *v, struct ibv_device **list, int nd, int all, int use_gid,
                                    int gid_index, wsync_error *err)
{
    int i, rc, failed = 0;
    for (i = 0; i < nd && v->n_nics < WSYNC_VERBS_MAX_NICS; i++) {
        unsigned from = 1;
        while (v->n_nics < WSYNC_VERBS_MAX_NICS) {
            rc = wsync__vnic_open(v, list[i], 0, from, use_gid, gid_index, &v->nic[v->n_nics], err);
            if (rc < 0) failed = 1;
            if (rc <= 0) break;
            from = (unsigned)v->nic[v->n_nics].port + 1;
            v->n_nics++;
            if (!all) return WSYNC_OK;
        }
    }
    if (v->n_nics) {
        wsync_error_set(err, WSYNC_OK, NULL);
        return WSYNC_OK;
    }
    if (failed) return err ? err->code : WSYNC_ERR_IO;
    return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: no active port on any of %d RDMA devices", nd);
}

static wsync_result wsync__vnic_open_all(wsync__vb *v, const char *spec, int use_gid, int gid_index, wsync_error *err)
{
    struct ibv_device **list;
    int nd = 0;
    wsync_result r = WSYNC_OK;
    errno = 0;
    list = v->ops.get_device_list(v->ops.user, &nd);
    if (!list)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: no RDMA devices (ibv_get_device_list: %s)",
                                strerror(errno ? errno : ENODEV));
    if (nd <= 0) r = wsync_error_set(err, WSYNC_ERR_IO, "%s", "verbs fabric: no RDMA devices");
    else if (!spec || !*spec) r = wsync__vnic_any(v, list, nd, 0, use_gid, gid_index, err);
    else if (strcmp(spec, "all") == 0) r = wsync__vnic_any(v, list, nd, 1, use_gid, gid_index, err);
    else {
        const char *p = spec;
        while (r == WSYNC_OK) {
            size_t tl = strcspn(p, ",");
            r = wsync__vnic_named(v, list, nd, p, tl, use_gid, gid_index, err);
            if (!p[tl]) break;
            p += tl + 1;
        }
    }
    v->ops.free_device_list(list);
    return r;
}

/* ---- queue pairs ------------------------------------------------------ */

static void wsync__vqp_destroy(wsync__vb *v, struct ibv_cq **cq, struct ibv_qp **qp)
{
    if (*qp) v->ops.destroy_qp(*qp);
    if (*cq) v->ops.destroy_cq(*cq);
    *qp = NULL;
    *cq = NULL;
}

/* An RC queue pair with a CQ of its own, in INIT. The CQ holds a
   completion for every request the queues can hold: on an error every
   outstanding request completes (flushed), signaled or not. */
static wsync_result wsync__vqp_create(wsync__vb *v, wsync__vnic *n, unsigned send_wr, unsigned recv_wr,
                                      int remote_write, struct ibv_cq **cq, struct ibv_qp **qp, wsync_error *err)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr a;
    int rc;
    *qp = NULL;
    *cq = v->ops.create_cq(n->ctx, (int)(send_wr + recv_wr + 1), NULL, NULL, 0);
    if (!*cq)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_create_cq(%s, %u): %s", n->name,
                                send_wr + recv_wr + 1, strerror(errno ? errno : ENOMEM));
    memset(&ia, 0, sizeof ia);
    ia.send_cq = *cq;
    ia.recv_cq = *cq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0;
    ia.cap.max_send_wr = send_wr;
    ia.cap.max_recv_wr = recv_wr;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    *qp = v->ops.create_qp(n->pd, &ia);
    if (!*qp) {
        rc = errno ? errno : ENOMEM;
        wsync__vqp_destroy(v, cq, qp);
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_create_qp(%s, RC, %u send, %u receive): %s",
                                n->name, send_wr, recv_wr, strerror(rc));
    }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = n->port;
    a.qp_access_flags = remote_write ? IBV_ACCESS_REMOTE_WRITE : 0;
    rc = v->ops.modify_qp(*qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        wsync__vqp_destroy(v, cq, qp);
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_modify_qp(%s, INIT): %s", n->name, strerror(rc));
    }
    return WSYNC_OK;
}

/* INIT -> RTR (addressed to the peer: GRH on RoCE, LID on InfiniBand),
   then -> RTS when this side sends. */
static wsync_result wsync__vqp_connect(wsync__vb *v, wsync__vnic *n, struct ibv_qp *qp, const wsync__vend *peer,
                                       uint32_t my_psn, int rts, wsync_error *err)
{
    struct ibv_qp_attr a;
    int rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)(peer->mtu < n->mtu ? peer->mtu : n->mtu);
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12; /* 0.64 ms */
    a.ah_attr.port_num = n->port;
    if (n->ethernet) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)n->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    } else {
        a.ah_attr.dlid = peer->lid;
    }
    rc = v->ops.modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_modify_qp(%s, RTR to QP %u): %s", n->name,
                                (unsigned)peer->qpn, strerror(rc));
    if (!rts) return WSYNC_OK;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;   /* 4.096 us * 2^14 = 67 ms per try */
    a.retry_cnt = 7;
    a.rnr_retry = 7;  /* a receiver out of receives stalls the sender; flush's timeout bounds it */
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    rc = v->ops.modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                              IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_modify_qp(%s, RTS): %s", n->name, strerror(rc));
    return WSYNC_OK;
}

static int wsync__vpost_recv(wsync__vb *v, struct ibv_qp *qp, unsigned n)
{
    while (n--) {
        struct ibv_recv_wr wr, *bad = NULL;
        memset(&wr, 0, sizeof wr);
        wr.num_sge = 0; /* write-with-immediate consumes a receive but writes no bytes through it */
        if (v->ops.post_recv(qp, &wr, &bad) != 0) return -1;
    }
    return 0;
}

static void wsync__vput_hdr(uint8_t *h, uint32_t magic, uint32_t n_lanes, uint32_t region_or_status, uint64_t key)
{
    wsync__rdma_put32(h, magic);
    wsync__rdma_put32(h + 4, WSYNC__VB_VERSION);
    wsync__rdma_put32(h + 8, WSYNC__VB_HDR + n_lanes * WSYNC__VB_LANE);
    wsync__rdma_put32(h + 12, region_or_status);
    wsync__rdma_put64(h + 16, key);
    wsync__rdma_put32(h + 24, n_lanes);
    wsync__rdma_put32(h + 28, 0);
}

/* ---- regions ------------------------------------------------------------ */

static void wsync__vmr_free(wsync__vb *v, struct wsync_fabric_mr *m)
{
    wsync__vmr *x = (wsync__vmr *)m->ext;
    unsigned i;
    if (!x) return;
    for (i = 0; i < v->n_nics; i++)
        if (x->mr[i]) v->ops.dereg_mr(x->mr[i]);
    wsync__rdma_free(&v->t.b.a, x);
    m->ext = NULL;
}

/* Unlinked first (no new handshake finds it, the connections writing to
   it are cut), then deregistered from every NIC: after that no remote
   write can land in the memory. */
static void wsync__vb_dereg(void *user, wsync_fabric_mr *m)
{
    wsync__vb *v = (wsync__vb *)user;
    if (!v || !m) return;
    wsync__fab_unlink(&v->t.b, m);
    wsync__vmr_free(v, m);
    wsync__rdma_free(&v->t.b.a, m->q);
    wsync__rdma_free(&v->t.b.a, m);
}

static wsync_result wsync__vb_reg(void *user, void *addr, uint64_t len, wsync_mem_kind kind, wsync_fabric_mr **mr,
                                  wsync_fabric_desc *desc, wsync_error *err)
{
    wsync__vb *v = (wsync__vb *)user;
    struct wsync_fabric_mr *m;
    wsync__vmr *x;
    wsync_result r;
    unsigned i;
    size_t hl;
    int access;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!v || !mr || !desc) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "reg arguments");
    memset(desc, 0, sizeof *desc);
    if (!v->t.b.send_only && !v->t.b.started && (r = wsync__tcp_listen(&v->t, err)) != WSYNC_OK) return r;
    if ((r = wsync__fab_reg_common(&v->t.b, addr, len, kind, &m, err)) != WSYNC_OK) return r;
    if (len > (uint64_t)SIZE_MAX) {
        wsync__rdma_free(&v->t.b.a, m);
        return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "%s", "reg: region too large");
    }
    x = (wsync__vmr *)wsync__rdma_alloc(&v->t.b.a, sizeof *x);
    if (!x) {
        wsync__rdma_free(&v->t.b.a, m);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "reg");
    }
    m->ext = x;
    /* a sender's source needs local access only; remote write needs local write too */
    access = IBV_ACCESS_LOCAL_WRITE | (v->t.b.send_only ? 0 : IBV_ACCESS_REMOTE_WRITE);
    for (i = 0; i < v->n_nics; i++) {
        x->mr[i] = v->ops.reg_mr(v->nic[i].pd, addr, (size_t)len, access);
        if (!x->mr[i]) {
            int e = errno ? errno : ENOMEM;
            wsync__vmr_free(v, m);
            wsync__rdma_free(&v->t.b.a, m);
            return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: ibv_reg_mr(%s, %llu bytes): %s%s", v->nic[i].name,
                                    (unsigned long long)len, strerror(e),
                                    e == ENOMEM || e == EPERM ? " (RLIMIT_MEMLOCK? see ulimit -l)" : "");
        }
    }
    wsync__fab_link(&v->t.b, m);
    desc->backend = WSYNC_FABRIC_VERBS;
    desc->kind = WSYNC_MEM_HOST;
    desc->version = 1;
    desc->addr = (uint64_t)(uintptr_t)addr;
    desc->len = len;
    if (m->linked) { /* a send_only fabric's descriptor names no endpoint: peers cannot open it */
        hl = strlen(v->t.adv_host);
        desc->bytes[0] = (uint8_t)v->t.port;
        desc->bytes[1] = (uint8_t)(v->t.port >> 8);
        desc->bytes[2] = (uint8_t)hl;
        desc->bytes[3] = (uint8_t)v->n_nics;
        wsync__rdma_put32(desc->bytes + 4, m->id);
        wsync__rdma_put64(desc->bytes + 8, m->key);
        wsync__rdma_put64(desc->bytes + 16, v->instance);
        for (i = 0; i < v->n_nics; i++) wsync__rdma_put32(desc->bytes + WSYNC__VB_DESC_FIXED + 4 * i, x->mr[i]->rkey);
        memcpy(desc->bytes + WSYNC__VB_DESC_FIXED + 4 * v->n_nics, v->t.adv_host, hl);
        desc->n_bytes = (uint32_t)(WSYNC__VB_DESC_FIXED + 4 * v->n_nics + hl);
    }
    *mr = m;
    return WSYNC_OK;
}

/* ---- the receiver: one thread per control connection ------------------ */

static void wsync__vb_note(wsync__fab_base *b, int rejected, const char *fmt, const char *arg)
{
    char msg[600];
    size_t k;
    snprintf(msg, sizeof msg, fmt, arg);
    k = strlen(msg); /* cut to the stats' room: the start is what matters */
    if (k >= sizeof b->stats.last_reject) k = sizeof b->stats.last_reject - 1;
    pthread_mutex_lock(&b->mu);
    if (rejected) b->stats.rejected++;
    else b->stats.dropped++;
    memcpy(b->stats.last_reject, msg, k);
    b->stats.last_reject[k] = 0;
    pthread_mutex_unlock(&b->mu);
}

/* A sender's hello, hostile until checked: 0, a WSYNC__VREJ_ reason, or
   -1 when it did not arrive whole within the timeout. */
static int wsync__vb_read_hello(wsync__vb *v, int fd, uint32_t *region, uint64_t *key, unsigned *n, wsync__vend *peer)
{
    uint8_t h[WSYNC__VB_HDR], lanes[WSYNC_VERBS_MAX_NICS * WSYNC__VB_LANE];
    int64_t deadline = wsync__rdma_now_ms() + v->t.b.timeout_ms, left;
    uint32_t nl, i;
    if (wsync__rdma_recv_full(fd, h, sizeof h, (int)v->t.b.timeout_ms, 0) != 1) return -1;
    if (wsync__rdma_get32(h) != WSYNC__VB_HELLO_MAGIC) return WSYNC__VREJ_MAGIC;
    if (wsync__rdma_get32(h + 4) != WSYNC__VB_VERSION) return WSYNC__VREJ_VERSION;
    nl = wsync__rdma_get32(h + 24);
    if (nl == 0 || nl > WSYNC_VERBS_MAX_NICS || wsync__rdma_get32(h + 8) != WSYNC__VB_HDR + nl * WSYNC__VB_LANE ||
        wsync__rdma_get32(h + 28) != 0)
        return WSYNC__VREJ_LENGTH;
    left = deadline - wsync__rdma_now_ms();
    if (left <= 0 || wsync__rdma_recv_full(fd, lanes, nl * WSYNC__VB_LANE, (int)left, 0) != 1) return -1;
    for (i = 0; i < nl; i++) {
        const uint8_t *raw = lanes + i * WSYNC__VB_LANE;
        wsync__vend_get(raw, &peer[i]);
        if (peer[i].nic >= v->n_nics || wsync__vend_bad(&peer[i], &v->nic[peer[i].nic], raw)) return WSYNC__VREJ_LANE;
    }
    *region = wsync__rdma_get32(h + 12);
    *key = wsync__rdma_get64(h + 16);
    *n = nl;
    return 0;
}

/* Until the sender closes the connection (or dereg or close cuts it):
   immediates from lane 0's receive completions into the region's queue,
   each receive posted again at once. Polled every millisecond: there is
   no completion channel (yet). */
static void wsync__vb_serve_loop(wsync__vb *v, wsync__fab_conn *c, struct wsync_fabric_mr *m, struct ibv_cq *cq,
                                 struct ibv_qp *qp)
{
    wsync__fab_base *b = &v->t.b;
    int busy = 0;
    for (;;) {
        struct ibv_wc wc[16];
        struct pollfd pf;
        int pr, k, i;
        pf.fd = c->fd;
        pf.events = POLLIN;
        pf.revents = 0;
        pr = poll(&pf, 1, busy ? 0 : 1);
        if (pr < 0 && errno != EINTR) return;
        if (pr > 0) {
            uint8_t x;
            ssize_t got = recv(c->fd, &x, 1, MSG_DONTWAIT);
            if (got == 0) return; /* the sender closed: its queue pairs are gone */
            if (got > 0) {
                wsync__vb_note(b, 1, "verbs: %s", "bytes on the control connection after the handshake");
                return;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
        }
        k = v->ops.poll_cq(cq, 16, wc);
        if (k < 0) {
            wsync__vb_note(b, 0, "verbs: %s", "ibv_poll_cq failed on a receiver's queue");
            return;
        }
        busy = k > 0;
        for (i = 0; i < k; i++) {
            int why = 0;
            if (wc[i].status != IBV_WC_SUCCESS) {
                wsync__vb_note(b, 0, "verbs receive completion: %s", wsync__vwc_name((int)wc[i].status));
                return;
            }
            if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc[i].wc_flags & IBV_WC_WITH_IMM)) {
                pthread_mutex_lock(&b->mu);
                if (c->busy == m) {
                    b->stats.frames++;
                    why = wsync__fab_imm_push(b, m, ntohl(wc[i].imm_data));
                }
                pthread_mutex_unlock(&b->mu);
            }
            if (why) {
                wsync__vb_note(b, 1, "verbs: %s", wsync__fab_rej_str((uint32_t)why));
                return;
            }
            if (wsync__vpost_recv(v, qp, 1) != 0) {
                wsync__vb_note(b, 0, "verbs: %s", "ibv_post_recv failed");
                return;
            }
        }
    }
}

/* Creates this side of every lane, in RTR; lane 0 with receives posted. */
static int wsync__vb_accept_lanes(wsync__vb *v, unsigned n, const wsync__vend *peer, wsync__vend *mine,
                                  struct ibv_cq **cq, struct ibv_qp **qp, wsync_error *e)
{
    unsigned i;
    for (i = 0; i < n; i++) {
        wsync__vnic *nic = &v->nic[peer[i].nic];
        uint32_t psn = (uint32_t)wsync__rdma_random64() & 0xFFFFFFu;
        if (wsync__vqp_create(v, nic, 1, i == 0 ? v->rq_depth : 1, 1, &cq[i], &qp[i], e) != WSYNC_OK) return -1;
        if (i == 0 && wsync__vpost_recv(v, qp[0], v->rq_depth) != 0) {
            wsync_error_set(e, WSYNC_ERR_IO, "verbs fabric: ibv_post_recv(%s): %s", nic->name, strerror(errno));
            return -1;
        }
        if (wsync__vqp_connect(v, nic, qp[i], &peer[i], psn, 0, e) != WSYNC_OK) return -1;
        mine[i] = wsync__vend_of(nic, peer[i].nic, qp[i], psn);
    }
    return 0;
}

static void wsync__vb_serve(wsync__fab_base *b, wsync__fab_conn *c)
{
    wsync__vb *v = (wsync__vb *)b;
    wsync__vend peer[WSYNC_VERBS_MAX_NICS], mine[WSYNC_VERBS_MAX_NICS];
    struct ibv_cq *cq[WSYNC_VERBS_MAX_NICS];
    struct ibv_qp *qp[WSYNC_VERBS_MAX_NICS];
    uint8_t rep[WSYNC__VB_HDR + WSYNC_VERBS_MAX_NICS * WSYNC__VB_LANE];
    struct wsync_fabric_mr *m = NULL;
    uint32_t region = 0;
    uint64_t key = 0;
    unsigned n = 0, i;
    int st;
    wsync_error e;
    memset(cq, 0, sizeof cq);
    memset(qp, 0, sizeof qp);
    st = wsync__vb_read_hello(v, c->fd, &region, &key, &n, peer);
    if (st < 0) {
        wsync__vb_note(b, 0, "verbs: %s", "a sender sent no complete handshake within the timeout");
        return;
    }
    if (st == 0) {
        pthread_mutex_lock(&b->mu);
        m = wsync__fab_find(b, region);
        if (!m) st = WSYNC__VREJ_REGION;
        else if (m->key != key) st = WSYNC__VREJ_KEY;
        else c->busy = m;
        pthread_mutex_unlock(&b->mu);
        /* the descriptor's key is the proof here (an rkey is a bearer secret anyway) */
        if (st == 0 && wsync__fab_authed(b, c, 0) != 0) st = WSYNC__VREJ_BUSY;
    }
    if (st == 0 && wsync__vb_accept_lanes(v, n, peer, mine, cq, qp, &e) != 0) {
        st = WSYNC__VREJ_VERBS;
        wsync__vb_note(b, 1, "%s", e.message);
    } else if (st) {
        wsync__vb_note(b, 1, "verbs handshake refused: %s", wsync__vrej_str((uint32_t)st));
    }
    if (st) n = 0;
    wsync__vput_hdr(rep, WSYNC__VB_REPLY_MAGIC, n, (uint32_t)st, 0);
    for (i = 0; i < n; i++) wsync__vend_put(rep + WSYNC__VB_HDR + i * WSYNC__VB_LANE, &mine[i]);
    if (wsync__rdma_send_all(c->fd, rep, WSYNC__VB_HDR + n * WSYNC__VB_LANE, 0) == 0 && st == 0)
        wsync__vb_serve_loop(v, c, m, cq[0], qp[0]);
    for (i = 0; i < WSYNC_VERBS_MAX_NICS; i++) wsync__vqp_destroy(v, &cq[i], &qp[i]);
}

/* ---- the sender: remotes ------------------------------------------------ */

static void wsync__vrem_free(wsync__vb *v, struct wsync_fabric_remote *r)
{
    wsync__vrem *x = (wsync__vrem *)r->ext;
    unsigned i;
    if (!x) return;
    for (i = 0; i < WSYNC_VERBS_MAX_NICS; i++) wsync__vqp_destroy(v, &x->lane[i].cq, &x->lane[i].qp);
    wsync__rdma_free(&v->t.b.a, x);
    r->ext = NULL;
}

static void wsync__vb_close_remote(void *user, wsync_fabric_remote *r)
{
    wsync__vb *v = (wsync__vb *)user;
    if (!v || !r) return;
    wsync__vrem_free(v, r);
    wsync__fab_close_remote(&v->t.b, r);
}

/* The descriptor, hostile until checked: endpoint, region, key, rkeys. */
static wsync_result wsync__vb_parse_desc(const wsync_fabric_desc *d, char *host, size_t host_cap, unsigned *port,
                                         unsigned *n_nics, uint32_t *rkeys, wsync_error *err)
{
    unsigned hl, i;
    if (d->backend != WSYNC_FABRIC_VERBS || d->version != 1 || d->kind != WSYNC_MEM_HOST)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "not a verbs fabric descriptor (backend %u, version %u, kind %u)", (unsigned)d->backend,
                                (unsigned)d->version, (unsigned)d->kind);
    if (d->n_bytes < WSYNC__VB_DESC_FIXED + 5 || d->n_bytes > WSYNC_FABRIC_DESC_MAX)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "verbs descriptor: %u backend bytes (a send-only fabric's?)",
                                (unsigned)d->n_bytes);
    *port = (unsigned)d->bytes[0] | (unsigned)d->bytes[1] << 8;
    hl = d->bytes[2];
    *n_nics = d->bytes[3];
    if (hl == 0 || hl >= host_cap || *n_nics == 0 || *n_nics > WSYNC_VERBS_MAX_NICS || *port == 0 || d->len == 0 ||
        d->n_bytes != WSYNC__VB_DESC_FIXED + 4 * *n_nics + hl)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s",
                                "verbs descriptor: malformed endpoint or NIC count");
    for (i = 0; i < *n_nics; i++) rkeys[i] = wsync__rdma_get32(d->bytes + WSYNC__VB_DESC_FIXED + 4 * i);
    memcpy(host, d->bytes + WSYNC__VB_DESC_FIXED + 4 * *n_nics, hl);
    host[hl] = 0;
    if (strlen(host) != hl)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs descriptor: NUL in host");
    return WSYNC_OK;
}

/* The receiver's reply, hostile until checked. */
static wsync_result wsync__vb_read_reply(wsync__vb *v, struct wsync_fabric_remote *r, unsigned n,
                                         const wsync__vend *mine, wsync__vend *peer, wsync_error *err)
{
    uint8_t h[WSYNC__VB_HDR], lanes[WSYNC_VERBS_MAX_NICS * WSYNC__VB_LANE];
    int64_t deadline = wsync__rdma_now_ms() + v->t.b.timeout_ms, left;
    wsync__vrem *x = (wsync__vrem *)r->ext;
    unsigned i;
    int rc = wsync__rdma_recv_full(r->fd, h, sizeof h, (int)v->t.b.timeout_ms, 0);
    if (rc == 0) return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s closed the connection in the handshake", r->peer);
    if (rc < 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: no handshake reply from %s within %u ms%s", r->peer,
                                v->t.b.timeout_ms, errno == ETIMEDOUT ? "" : " (the connection failed)");
    if (wsync__rdma_get32(h) != WSYNC__VB_REPLY_MAGIC || wsync__rdma_get32(h + 4) != WSYNC__VB_VERSION)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s answered with a bad magic or version %u", r->peer,
                                (unsigned)wsync__rdma_get32(h + 4));
    if (wsync__rdma_get32(h + 12) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s refused the handshake: %s", r->peer,
                                wsync__vrej_str(wsync__rdma_get32(h + 12)));
    if (wsync__rdma_get32(h + 24) != n || wsync__rdma_get32(h + 8) != WSYNC__VB_HDR + n * WSYNC__VB_LANE ||
        wsync__rdma_get32(h + 28) != 0 || wsync__rdma_get64(h + 16) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s answered with a malformed handshake (%u lanes, asked %u)",
                                r->peer, (unsigned)wsync__rdma_get32(h + 24), n);
    left = deadline - wsync__rdma_now_ms();
    if (left <= 0 || wsync__rdma_recv_full(r->fd, lanes, n * WSYNC__VB_LANE, (int)left, 0) != 1)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s: a truncated handshake reply within %u ms",
                                r->peer, v->t.b.timeout_ms);
    for (i = 0; i < n; i++) {
        const uint8_t *raw = lanes + i * WSYNC__VB_LANE;
        wsync__vend_get(raw, &peer[i]);
        if (peer[i].nic != mine[i].nic || wsync__vend_bad(&peer[i], x->lane[i].nic, raw))
            return wsync_error_set(err, WSYNC_ERR_IO,
                                    "verbs fabric: %s lane %u: invalid queue pair, PSN, MTU or address, or another link "
                                    "layer than %s's",
                                    r->peer, i, x->lane[i].nic->name);
    }
    return WSYNC_OK;
}

/* Lanes: max(our NICs, the receiver's); lane i goes from our NIC i % S
   to theirs i % R. */
static wsync_result wsync__vb_handshake(wsync__vb *v, struct wsync_fabric_remote *r, unsigned rn,
                                        const uint32_t *rkeys, wsync_error *err)
{
    wsync__vrem *x = (wsync__vrem *)r->ext;
    wsync__vend mine[WSYNC_VERBS_MAX_NICS], peer[WSYNC_VERBS_MAX_NICS];
    uint8_t hello[WSYNC__VB_HDR + WSYNC_VERBS_MAX_NICS * WSYNC__VB_LANE];
    wsync_result res;
    unsigned i, n = v->n_nics > rn ? v->n_nics : rn;
    x->n = n;
    for (i = 0; i < n; i++) {
        wsync__vlane *l = &x->lane[i];
        uint32_t psn = (uint32_t)wsync__rdma_random64() & 0xFFFFFFu;
        l->nic_i = i % v->n_nics;
        l->nic = &v->nic[l->nic_i];
        l->rkey = rkeys[i % rn];
        if ((res = wsync__vqp_create(v, l->nic, v->sq_depth, 1, 0, &l->cq, &l->qp, err)) != WSYNC_OK) return res;
        mine[i] = wsync__vend_of(l->nic, i % rn, l->qp, psn);
    }
    wsync__vput_hdr(hello, WSYNC__VB_HELLO_MAGIC, n, r->region, r->key);
    for (i = 0; i < n; i++) wsync__vend_put(hello + WSYNC__VB_HDR + i * WSYNC__VB_LANE, &mine[i]);
    if (wsync__rdma_send_all(r->fd, hello, WSYNC__VB_HDR + n * WSYNC__VB_LANE, 0) != 0)
        return wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: sending the handshake to %s: %s", r->peer, strerror(errno));
    if ((res = wsync__vb_read_reply(v, r, n, mine, peer, err)) != WSYNC_OK) return res;
    for (i = 0; i < n; i++) {
        wsync__vlane *l = &x->lane[i];
        uint32_t mm = peer[i].max_msg < l->nic->max_msg ? peer[i].max_msg : l->nic->max_msg;
        l->max_msg = mm < v->max_wr ? mm : v->max_wr;
        if ((res = wsync__vqp_connect(v, l->nic, l->qp, &peer[i], mine[i].psn, 1, err)) != WSYNC_OK) return res;
    }
    return WSYNC_OK;
}

static wsync_result wsync__vb_open_remote(void *user, const wsync_fabric_desc *d, wsync_fabric_remote **out,
                                          wsync_error *err)
{
    wsync__vb *v = (wsync__vb *)user;
    struct wsync_fabric_remote *r;
    uint32_t rkeys[WSYNC_VERBS_MAX_NICS];
    char host[64], why[160];
    unsigned port = 0, rn = 0;
    wsync_result res;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!v || !d || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "open_remote arguments");
    *out = NULL;
    if ((res = wsync__vb_parse_desc(d, host, sizeof host, &port, &rn, rkeys, err)) != WSYNC_OK) return res;
    r = (struct wsync_fabric_remote *)wsync__rdma_alloc(&v->t.b.a, sizeof *r);
    if (r) r->ext = wsync__rdma_alloc(&v->t.b.a, sizeof(wsync__vrem));
    if (!r || !r->ext) {
        wsync__rdma_free(&v->t.b.a, r);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "open_remote");
    }
    r->backend = WSYNC_FABRIC_VERBS;
    r->region = wsync__rdma_get32(d->bytes + 4);
    r->key = wsync__rdma_get64(d->bytes + 8);
    r->addr = d->addr;
    r->len = d->len;
    snprintf(r->peer, sizeof r->peer, "%s:%u", host, port);
    r->fd = wsync__tcp_connect(host, port, v->t.connect_timeout_ms, why, sizeof why);
    if (r->fd < 0) {
        res = wsync_error_set(err, WSYNC_ERR_IO, "verbs fabric: %s: %s", r->peer, why);
        goto fail;
    }
    wsync__rdma_set_timeouts(r->fd, v->t.b.timeout_ms);
    if ((res = wsync__vb_handshake(v, r, rn, rkeys, err)) != WSYNC_OK) goto fail;
    r->next = v->t.b.remotes;
    v->t.b.remotes = r;
    *out = r;
    return WSYNC_OK;
fail:
    wsync__vrem_free(v, r);
    if (r->fd >= 0) close(r->fd);
    wsync__rdma_free(&v->t.b.a, r);
    return res;
}

/* ---- the sender: posting and polling ------------------------------------ */

static wsync_result wsync__vb_broken(struct wsync_fabric_remote *r, wsync_error *err, const char *msg)
{
    return wsync__fab_break(r, err, "%s", msg);
}

/* One poll of lane l's CQ: the completions' count, or -1 when one of
   them failed. An error completion breaks the remote: RC moved the queue
   pair to the error state, and every request after it is flushed. */
static int wsync__vb_reap(wsync__vb *v, struct wsync_fabric_remote *r, wsync__vlane *l, wsync_error *err)
{
    struct ibv_wc wc[16];
    char msg[300];
    int k = v->ops.poll_cq(l->cq, 16, wc), i;
    if (k < 0) {
        snprintf(msg, sizeof msg, "ibv_poll_cq(%s) failed (%d)", l->nic->name, k);
        wsync__vb_broken(r, err, msg);
        return -1;
    }
    for (i = 0; i < k; i++) {
        v->st.completions++;
        if (wc[i].status != IBV_WC_SUCCESS) {
            snprintf(msg, sizeof msg, "a write on %s completed with %s (status %d, vendor error 0x%x)", l->nic->name,
                     wsync__vwc_name((int)wc[i].status), (int)wc[i].status, (unsigned)wc[i].vendor_err);
            wsync__vb_broken(r, err, msg);
            return -1;
        }
        if (wc[i].wr_id > l->done && wc[i].wr_id <= l->posted) l->done = wc[i].wr_id;
    }
    return k;
}

/* Polls lane l until `target` requests are known finished. */
static wsync_result wsync__vb_poll(wsync__vb *v, struct wsync_fabric_remote *r, wsync__vlane *l, uint64_t target,
                                   int64_t deadline, wsync_error *err)
{
    unsigned idle = 0;
    char msg[300];
    while (l->done < target) {
        int k = wsync__vb_reap(v, r, l, err);
        if (k < 0) return WSYNC_ERR_IO;
        if (k > 0) {
            idle = 0;
            continue;
        }
        if (wsync__rdma_now_ms() > deadline) {
            snprintf(msg, sizeof msg, "no completion from %s within %u ms (%llu requests outstanding)", l->nic->name,
                     v->t.b.timeout_ms, (unsigned long long)(l->posted - l->done));
            return wsync__vb_broken(r, err, msg);
        }
        if (++idle > 64) {
            struct timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = 20000;
            nanosleep(&ts, NULL);
        }
    }
    return WSYNC_OK;
}

/* Posts one request. Every signal_every-th asks for a completion, and so
   does the one that fills the queue, so that a full queue always has a
   completion coming; a full queue (by count, or ENOMEM from the provider)
   is polled until it has room. */
static wsync_result wsync__vb_post(wsync__vb *v, struct wsync_fabric_remote *r, wsync__vlane *l,
                                   struct ibv_send_wr *wr, int force_sig, wsync_error *err)
{
    int64_t deadline = wsync__rdma_now_ms() + v->t.b.timeout_ms;
    char msg[200];
    for (;;) {
        struct ibv_send_wr *bad = NULL;
        wsync_result res;
        int sig, rc, rc2;
        if (l->posted - l->done >= v->sq_depth) {
            v->st.sq_full_waits++;
            res = wsync__vb_poll(v, r, l, l->posted - v->sq_depth + 1, deadline, err);
            if (res != WSYNC_OK) return res;
        }
        sig = force_sig || l->since_sig + 1 >= v->signal_every || l->posted + 1 - l->done >= v->sq_depth;
        wr->wr_id = l->posted + 1;
        wr->send_flags = sig ? IBV_SEND_SIGNALED : 0;
        rc = v->ops.post_send(l->qp, wr, &bad);
        if (rc == 0) {
            l->posted++;
            if (sig) {
                l->since_sig = 0;
                l->last_sig = l->posted;
                v->st.signaled++;
            } else {
                l->since_sig++;
            }
            l->nic->wrs++;
            l->nic->bytes += wr->num_sge ? wr->sg_list[0].length : 0;
            return WSYNC_OK;
        }
        if (rc != ENOMEM) {
            /* an error completion moved the queue pair out of RTS: that is the reason to report */
            while ((rc2 = wsync__vb_reap(v, r, l, err)) > 0) {
            }
            if (rc2 < 0) return WSYNC_ERR_IO;
            snprintf(msg, sizeof msg, "ibv_post_send(%s): %s", l->nic->name, strerror(rc));
            return wsync__vb_broken(r, err, msg);
        }
        /* fuller than counted (the provider's own limit): completions make room */
        v->st.enomem_retries++;
        if (l->last_sig > l->done) {
            if ((res = wsync__vb_poll(v, r, l, l->done + 1, deadline, err)) != WSYNC_OK) return res;
        } else if (wsync__rdma_now_ms() > deadline) {
            snprintf(msg, sizeof msg, "ibv_post_send(%s): the send queue stayed full (ENOMEM) for %u ms", l->nic->name,
                     v->t.b.timeout_ms);
            return wsync__vb_broken(r, err, msg);
        } else {
            struct timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = 50000;
            nanosleep(&ts, NULL);
        }
    }
}

/* len bytes on one lane, in requests of at most the lane's max_msg; the
   last carries the immediate when there is one (len 0: one empty one). */
static wsync_result wsync__vb_put(wsync__vb *v, const struct wsync_fabric_mr *src, uint64_t src_off,
                                  struct wsync_fabric_remote *r, wsync__vlane *l, uint64_t dst_off, uint64_t len,
                                  int with_imm, uint32_t imm, wsync_error *err)
{
    const wsync__vmr *x = (const wsync__vmr *)src->ext;
    wsync_result res;
    do {
        struct ibv_sge sge;
        struct ibv_send_wr wr;
        uint64_t n = len < l->max_msg ? len : l->max_msg;
        int last = n == len;
        memset(&wr, 0, sizeof wr);
        sge.addr = (uint64_t)(uintptr_t)(src->addr + src_off);
        sge.length = (uint32_t)n;
        sge.lkey = x->mr[l->nic_i]->lkey;
        wr.sg_list = &sge;
        wr.num_sge = n ? 1 : 0;
        wr.opcode = last && with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        if (last && with_imm) wr.imm_data = htonl(imm);
        wr.wr.rdma.remote_addr = r->addr + dst_off;
        wr.wr.rdma.rkey = l->rkey;
        if ((res = wsync__vb_post(v, r, l, &wr, 0, err)) != WSYNC_OK) return res;
        if (last && with_imm) v->st.imms++;
        src_off += n;
        dst_off += n;
        len -= n;
    } while (len);
    return WSYNC_OK;
}

/* Waits until every request posted on l finished; when the last ones
   asked for no completion, an empty write that does goes after them. */
static wsync_result wsync__vb_drain(wsync__vb *v, struct wsync_fabric_remote *r, wsync__vlane *l, wsync_error *err)
{
    wsync_result res;
    if (l->done == l->posted) return WSYNC_OK;
    if (l->last_sig < l->posted) {
        struct ibv_send_wr wr;
        memset(&wr, 0, sizeof wr);
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.num_sge = 0;
        wr.wr.rdma.remote_addr = r->addr;
        wr.wr.rdma.rkey = l->rkey;
        if ((res = wsync__vb_post(v, r, l, &wr, 1, err)) != WSYNC_OK) return res;
    }
    return wsync__vb_poll(v, r, l, l->posted, wsync__rdma_now_ms() + v->t.b.timeout_ms, err);
}

/* A write: one lane when short (round-robin), else split across every
   lane on 4 KiB boundaries. An immediate goes on lane 0 after the other
   lanes drained: RC orders requests within a queue pair only, and the
   immediate must come after every byte written to the remote so far. */
static wsync_result wsync__vb_send(wsync__vb *v, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                   uint64_t dst_off, uint64_t len, int with_imm, uint32_t imm, wsync_error *err)
{
    wsync__vrem *x;
    wsync_result res;
    uint64_t piece;
    unsigned i, n;
    wsync_error_set(err, WSYNC_OK, NULL);
    if ((res = wsync__fab_check_write(v ? &v->t.b : NULL, src, src_off, dst, dst_off, len, err)) != WSYNC_OK)
        return res;
    x = (wsync__vrem *)dst->ext;
    if (wsync__rdma_peer_gone(dst->fd))
        return wsync__vb_broken(dst, err, "the receiver closed the control connection (exited, or deregistered the region)");
    if (len == 0 && !with_imm) return WSYNC_OK;
    n = x->n;
    if (n == 1 || len / n < v->split_min) {
        wsync__vlane *l = with_imm ? &x->lane[0] : &x->lane[x->rr++ % n];
        for (i = 1; with_imm && i < n; i++)
            if ((res = wsync__vb_drain(v, dst, &x->lane[i], err)) != WSYNC_OK) return res;
        return wsync__vb_put(v, src, src_off, dst, l, dst_off, len, with_imm, imm, err);
    }
    piece = (len / n) & ~(uint64_t)4095;
    for (i = 0; i < n; i++) {
        uint64_t off = piece * i, cnt = i + 1 == n ? len - off : piece;
        res = wsync__vb_put(v, src, src_off + off, dst, &x->lane[i], dst_off + off, cnt, 0, 0, err);
        if (res != WSYNC_OK) return res;
    }
    if (!with_imm) return WSYNC_OK;
    for (i = 1; i < n; i++)
        if ((res = wsync__vb_drain(v, dst, &x->lane[i], err)) != WSYNC_OK) return res;
    return wsync__vb_put(v, src, src_off, dst, &x->lane[0], dst_off, 0, 1, imm, err);
}

static wsync_result wsync__vb_write(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                    uint64_t dst_off, uint64_t len, wsync_error *err)
{
    return wsync__vb_send((wsync__vb *)user, src, src_off, dst, dst_off, len, 0, 0, err);
}

static wsync_result wsync__vb_write_imm(void *user, wsync_fabric_mr *src, uint64_t src_off, wsync_fabric_remote *dst,
                                        uint64_t dst_off, uint64_t len, uint32_t imm, wsync_error *err)
{
    return wsync__vb_send((wsync__vb *)user, src, src_off, dst, dst_off, len, 1, imm, err);
}

/* Every lane of every remote drained; the first broken remote reported. */
static wsync_result wsync__vb_flush(void *user, wsync_error *err)
{
    wsync__vb *v = (wsync__vb *)user;
    struct wsync_fabric_remote *r;
    unsigned i;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!v) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "flush arguments");
    for (r = v->t.b.remotes; r; r = r->next) {
        wsync__vrem *x = (wsync__vrem *)r->ext;
        if (r->broken) continue;
        if (wsync__rdma_peer_gone(r->fd)) {
            wsync__vb_broken(r, NULL, "the receiver closed the control connection (exited, or deregistered the region)");
            continue;
        }
        for (i = 0; i < x->n; i++)
            if (wsync__vb_drain(v, r, &x->lane[i], NULL) != WSYNC_OK) break;
    }
    for (r = v->t.b.remotes; r; r = r->next)
        if (r->broken)
            return wsync_error_set(err, WSYNC_ERR_IO, "flush: %s region %u: %s", r->peer, (unsigned)r->region, r->why);
    return WSYNC_OK;
}

/* ---- open and close ------------------------------------------------------ */

static void wsync__vb_close(void *user)
{
    wsync__vb *v = (wsync__vb *)user;
    wsync_allocator a;
    unsigned i;
    if (!v) return;
    a = v->t.b.a;
    wsync__fab_srv_stop(&v->t.b); /* the connection threads destroy their queue pairs */
    while (v->t.b.remotes) wsync__vb_close_remote(v, v->t.b.remotes);
    while (v->t.b.regions) wsync__vb_dereg(v, v->t.b.regions);
    while (v->t.b.sources) wsync__vb_dereg(v, v->t.b.sources);
    wsync__fab_base_close(&v->t.b);
    for (i = 0; i < v->n_nics; i++) wsync__vnic_close(v, &v->nic[i]);
    wsync__rdma_free(&a, v);
}

static wsync_result wsync__vb_check_ops(const wsync_verbs_ops *o, wsync_error *err)
{
    if (!o->get_device_list || !o->free_device_list || !o->get_device_name || !o->open_device || !o->close_device ||
        !o->query_device || !o->query_port || !o->query_gid || !o->alloc_pd || !o->dealloc_pd || !o->reg_mr ||
        !o->dereg_mr || !o->create_cq || !o->destroy_cq || !o->create_qp || !o->modify_qp || !o->destroy_qp ||
        !o->post_send || !o->post_recv || !o->poll_cq)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs fabric: options.ops misses a function");
    return WSYNC_OK;
}

static unsigned wsync__vclamp(unsigned v, unsigned dflt, unsigned lo, unsigned hi)
{
    if (!v) v = dflt;
    return v < lo ? lo : v > hi ? hi : v;
}

static void wsync__vb_settings(wsync__vb *v, const wsync_fabric_verbs_options *o)
{
    const char *adv;
    v->t.b.serve = wsync__vb_serve;
    v->t.b.timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
    v->t.b.max_conns = 256;
    v->t.b.send_only = o->send_only;
    snprintf(v->t.bind_host, sizeof v->t.bind_host, "%s", o->bind_host);
    adv = o->advertise_host && *o->advertise_host ? o->advertise_host : NULL;
    if (!adv && strcmp(o->bind_host, "0.0.0.0") != 0 && strcmp(o->bind_host, "::") != 0) adv = o->bind_host;
    if (adv) snprintf(v->t.adv_host, sizeof v->t.adv_host, "%s", adv);
    else if (gethostname(v->t.adv_host, sizeof v->t.adv_host - 1) != 0 || !v->t.adv_host[0])
        snprintf(v->t.adv_host, sizeof v->t.adv_host, "%s", "127.0.0.1");
    v->t.port = o->port;
    v->t.connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : 5000;
    v->t.sockbuf = 256u << 10;
    v->t.chunk = 4u << 20;
    v->sq_depth = wsync__vclamp(o->sq_depth, 256, 2, 1u << 15);
    v->signal_every = wsync__vclamp(o->signal_every, v->sq_depth / 4, 1, v->sq_depth);
    v->rq_depth = wsync__vclamp(o->rq_depth, 256, 1, 1u << 15);
    v->max_wr = wsync__vclamp(o->max_wr_bytes, 1u << 30, 4096, 1u << 30);
    v->split_min = wsync__vclamp(o->split_min, 256u << 10, 4096, UINT32_MAX);
    v->instance = wsync__rdma_random64();
}

WSYNC_DEF wsync_result wsync_fabric_verbs_open(const wsync_fabric_verbs_options *opt, wsync_fabric *out,
                                               wsync_error *err)
{
    wsync_fabric_verbs_options o;
    wsync__vb *v;
    wsync_result r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs_open arguments");
    memset(out, 0, sizeof *out);
    if (opt) o = *opt;
    else memset(&o, 0, sizeof o);
    if (!o.bind_host || !*o.bind_host) o.bind_host = "127.0.0.1";
    if (strlen(o.bind_host) >= 256 || (o.advertise_host && strlen(o.advertise_host) >= 64) || o.port > 65535)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs fabric: host name too long or bad port");
    v = (wsync__vb *)wsync__rdma_alloc(&o.allocator, sizeof *v);
    if (!v) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "verbs_open");
    if (o.ops) v->ops = *o.ops;
    r = o.ops ? wsync__vb_check_ops(&v->ops, err) : wsync__vops_default(&v->ops, err);
    if (r == WSYNC_OK) r = wsync__fab_base_init(&v->t.b, WSYNC_FABRIC_VERBS, &o.allocator, err);
    if (r != WSYNC_OK) {
        wsync__rdma_free(&o.allocator, v);
        return r;
    }
    wsync__vb_settings(v, &o);
    if (!v->t.adv_host[0] || strlen(v->t.adv_host) > 63) {
        wsync__vb_close(v);
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "verbs fabric: advertised host too long");
    }
    if ((r = wsync__vnic_open_all(v, o.devices, o.use_gid_index, o.gid_index, err)) != WSYNC_OK) {
        wsync__vb_close(v);
        return r;
    }
    out->user = v;
    out->backend = WSYNC_FABRIC_VERBS;
    out->reg = wsync__vb_reg;
    out->dereg = wsync__vb_dereg;
    out->open_remote = wsync__vb_open_remote;
    out->close_remote = wsync__vb_close_remote;
    out->write = wsync__vb_write;
    out->write_imm = wsync__vb_write_imm;
    out->recv_imm = wsync__fab_recv_imm;
    out->flush = wsync__vb_flush;
    out->close = wsync__vb_close;
    return WSYNC_OK;
}

WSYNC_DEF unsigned wsync_fabric_verbs_port(const wsync_fabric *f)
{
    const wsync__vb *v;
    if (!f || f->backend != WSYNC_FABRIC_VERBS || !f->user) return 0;
    v = (const wsync__vb *)f->user;
    return v->t.b.started ? v->t.port : 0;
}

WSYNC_DEF int wsync_fabric_verbs_stats_get(const wsync_fabric *f, wsync_fabric_verbs_stats *out)
{
    const wsync__vb *v;
    unsigned i;
    if (!f || f->backend != WSYNC_FABRIC_VERBS || !f->user || !out) return 0;
    v = (const wsync__vb *)f->user;
    *out = v->st;
    out->n_nics = v->n_nics;
    for (i = 0; i < v->n_nics; i++) {
        snprintf(out->nic[i].name, sizeof out->nic[i].name, "%s", v->nic[i].name);
        out->nic[i].ethernet = v->nic[i].ethernet;
        out->nic[i].bytes = v->nic[i].bytes;
        out->nic[i].wrs = v->nic[i].wrs;
    }
    return 1;
}

#else /* !WSYNC__HAVE_VERBS */

WSYNC_DEF wsync_result wsync_fabric_verbs_open(const wsync_fabric_verbs_options *opt, wsync_fabric *out,
                                               wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    wsync_error_set(err, WSYNC_OK, NULL);
    return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "%s",
                            "the verbs fabric: built without rdma-core's headers (<infiniband/verbs.h>; Debian: "
                            "libibverbs-dev), or with WSYNC_RDMA_NO_VERBS");
}
WSYNC_DEF unsigned wsync_fabric_verbs_port(const wsync_fabric *f)
{
    (void)f;
    return 0;
}
WSYNC_DEF int wsync_fabric_verbs_stats_get(const wsync_fabric *f, wsync_fabric_verbs_stats *out)
{
    (void)f;
    (void)out;
    return 0;
}

#endif /* WSYNC__HAVE_VERBS */

#else /* !WSYNC__RDMA_OK */

WSYNC_DEF int wsync_fabric_stats_get(const wsync_fabric *f, wsync_fabric_stats *out)
{
    (void)f;
    (void)out;
    return 0;
}
WSYNC_DEF wsync_result wsync_fabric_auth_set(wsync_fabric *f, const void *job_key, size_t key_len, uint32_t sender_id,
                                             wsync_error *err)
{
    (void)f;
    (void)job_key;
    (void)key_len;
    (void)sender_id;
    return wsync__rdma_no(err, "wsync_fabric_auth_set");
}
WSYNC_DEF wsync_result wsync_fabric_window_open(wsync_fabric *f, uint64_t step, const uint32_t *senders, size_t n,
                                                wsync_error *err)
{
    (void)f;
    (void)step;
    (void)senders;
    (void)n;
    return wsync__rdma_no(err, "wsync_fabric_window_open");
}
WSYNC_DEF wsync_result wsync_fabric_window_close(wsync_fabric *f, uint64_t step, wsync_error *err)
{
    (void)f;
    (void)step;
    return wsync__rdma_no(err, "wsync_fabric_window_close");
}
WSYNC_DEF wsync_result wsync_fabric_tcp_open(const wsync_fabric_tcp_options *opt, wsync_fabric *out,
                                             wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync__rdma_no(err, "the TCP fabric");
}
WSYNC_DEF unsigned wsync_fabric_tcp_port(const wsync_fabric *f)
{
    (void)f;
    return 0;
}
WSYNC_DEF wsync_result wsync_fabric_host_open(const wsync_fabric_host_options *opt, wsync_fabric *out,
                                              wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync__rdma_no(err, "the one-host fabric");
}
WSYNC_DEF wsync_result wsync_fabric_host_alloc(wsync_fabric *f, uint64_t len, void **ptr, wsync_error *err)
{
    (void)f;
    (void)len;
    if (ptr) *ptr = NULL;
    return wsync__rdma_no(err, "wsync_fabric_host_alloc");
}
WSYNC_DEF void wsync_fabric_host_free(wsync_fabric *f, void *ptr)
{
    (void)f;
    (void)ptr;
}
WSYNC_DEF wsync_fabric_host_mode wsync_fabric_host_remote_mode(const wsync_fabric *f,
                                                               const wsync_fabric_remote *r)
{
    (void)f;
    (void)r;
    return WSYNC_FABRIC_HOST_AUTO;
}
WSYNC_DEF int wsync_fabric_host_cma_allowed(int pid, const void *addr, char *why, size_t why_cap)
{
    (void)pid;
    (void)addr;
    if (why && why_cap) snprintf(why, why_cap, "%s", "not built with the one-host backend");
    return 0;
}
WSYNC_DEF wsync_result wsync_fabric_verbs_open(const wsync_fabric_verbs_options *opt, wsync_fabric *out,
                                               wsync_error *err)
{
    (void)opt;
    if (out) memset(out, 0, sizeof *out);
    return wsync__rdma_no(err, "the verbs fabric");
}
WSYNC_DEF unsigned wsync_fabric_verbs_port(const wsync_fabric *f)
{
    (void)f;
    return 0;
}
WSYNC_DEF int wsync_fabric_verbs_stats_get(const wsync_fabric *f, wsync_fabric_verbs_stats *out)
{
    (void)f;
    (void)out;
    return 0;
}


#endif /* WSYNC__RDMA_OK */

/* ======================================================================
   IMPLEMENTATION: the executor and fp8 preparation  >>executor
   ====================================================================== */

WSYNC_DEF uint64_t wsync_quantize_scale_count(uint64_t rows, uint64_t cols, uint64_t block)
{
    if (block == 0) return 1;
    return (rows / block + (rows % block != 0)) * (cols / block + (cols % block != 0));
}

/* wsync_f32_to_e4m3(f, WSYNC_FP8_SATURATE), inlined and without a branch
   (checked equal for all 2^32 inputs), so that a row of them vectorizes:
   normal results by rounding the f32 bits, subnormal ones (units of 2^-9)
   by adding 2^23 in float, which rounds to nearest even, each computed for
   every input and one selected (the subnormal path sees 0 for inputs it
   does not own, so its float-to-integer conversion stays in range). That
   needs float arithmetic in float (FLT_EVAL_METHOD 0), else the library's
   function is used. */
static uint8_t wsync__e4m3_sat(float f)
{
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    uint32_t u, a, b, code, small, sub;
    float t;
    memcpy(&u, &f, 4);
    a = u & 0x7FFFFFFFu;
    b = a - (120u << 23); /* at least 2^-6: normal, or beyond the format */
    b += 0x7FFFFu + ((b >> 20) & 1u);
    code = b >> 20;
    code = code > 0x7Eu ? 0x7Eu : code;  /* saturate, infinity too */
    code = a > 0x7F800000u ? 0x7Fu : code; /* NaN */
    small = a < 0x3C800000u ? a : 0u;
    memcpy(&t, &small, 4);
    t = t * 512.0f;
    t = (t + 8388608.0f) - 8388608.0f; /* 0 to 8 */
    sub = (uint32_t)(int32_t)t;
    code = a < 0x3C800000u ? sub : code;
    return (uint8_t)(((u >> 24) & 0x80u) | code);
#else
    return wsync_f32_to_e4m3(f, WSYNC_FP8_SATURATE);
#endif
}

static float wsync__quant_bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* SSE2, which every x86-64 has: the quantizer's loops four and eight lanes
   wide, with the same operations as the scalar code (IEEE division, the
   same integer steps), so the same codes; gcc at -O2 keeps the scalar
   loops scalar (it does not if-convert float operations that may trap). */
#if !defined(WSYNC_NO_SIMD) && defined(__SSE2__) && defined(__x86_64__) && defined(FLT_EVAL_METHOD) && \
    FLT_EVAL_METHOD == 0
#define WSYNC__QSSE2 1
#include <emmintrin.h>
/* wsync__e4m3_sat of four floats (the lanes of the result: the codes). */
static __m128i wsync__e4m3_sat4(__m128 f)
{
    const __m128i u = _mm_castps_si128(f), a = _mm_and_si128(u, _mm_set1_epi32(0x7FFFFFFF));
    __m128i b = _mm_sub_epi32(a, _mm_set1_epi32(120 << 23)), code, big, nan, small, sub;
    __m128 t;
    b = _mm_add_epi32(b, _mm_add_epi32(_mm_set1_epi32(0x7FFFF), _mm_and_si128(_mm_srli_epi32(b, 20), _mm_set1_epi32(1))));
    code = _mm_srli_epi32(b, 20); /* at most 0xFFF: a signed compare is an unsigned one */
    big = _mm_cmpgt_epi32(code, _mm_set1_epi32(0x7E));
    code = _mm_or_si128(_mm_and_si128(big, _mm_set1_epi32(0x7E)), _mm_andnot_si128(big, code));
    nan = _mm_cmpgt_epi32(a, _mm_set1_epi32(0x7F800000)); /* a < 2^31: signed is unsigned */
    code = _mm_or_si128(_mm_and_si128(nan, _mm_set1_epi32(0x7F)), _mm_andnot_si128(nan, code));
    small = _mm_cmplt_epi32(a, _mm_set1_epi32(0x3C800000));
    t = _mm_mul_ps(_mm_castsi128_ps(_mm_and_si128(small, a)), _mm_set1_ps(512.0f));
    t = _mm_sub_ps(_mm_add_ps(t, _mm_set1_ps(8388608.0f)), _mm_set1_ps(8388608.0f));
    sub = _mm_cvttps_epi32(t);
    code = _mm_or_si128(_mm_and_si128(small, sub), _mm_andnot_si128(small, code));
    return _mm_or_si128(code, _mm_and_si128(_mm_srli_epi32(u, 24), _mm_set1_epi32(0x80)));
}
#if defined(__GNUC__)
/* AVX2 where the CPU has it (chosen at run time): eight lanes. -1: not yet
   asked; tests set 0 to run the SSE2 loop on a CPU with AVX2. */
#include <immintrin.h>
static int wsync__quant_avx2 = -1;
#define WSYNC__QAVX2 __attribute__((target("avx2")))
#define WSYNC__QAVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline
WSYNC__QAVX2_INLINE __m256i wsync__e4m3_sat8(__m256 f)
{
    const __m256i u = _mm256_castps_si256(f), a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i b = _mm256_sub_epi32(a, _mm256_set1_epi32(120 << 23)), code, small;
    __m256 t;
    b = _mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF),
                                             _mm256_and_si256(_mm256_srli_epi32(b, 20), _mm256_set1_epi32(1))));
    code = _mm256_min_epu32(_mm256_srli_epi32(b, 20), _mm256_set1_epi32(0x7E));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000)));
    small = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), a);
    t = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(small, a)), _mm256_set1_ps(512.0f));
    t = _mm256_sub_ps(_mm256_add_ps(t, _mm256_set1_ps(8388608.0f)), _mm256_set1_ps(8388608.0f));
    code = _mm256_blendv_epi8(code, _mm256_cvttps_epi32(t), small);
    return _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)));
}
/* Columns [0, n - n % 16) of a row; returns how many. */
WSYNC__QAVX2 static uint64_t wsync__quant_row_avx2(const uint16_t *in, uint8_t *out, uint64_t n, float scale)
{
    const __m256 s = _mm256_set1_ps(scale);
    const __m256i z = _mm256_setzero_si256();
    uint64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        /* in-lane unpacks: elements 0-3 and 8-11, then 4-7 and 12-15; the
           in-lane packs put them back in order, 64-bit halves 0 and 2 */
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(in + c));
        __m256i q0 = wsync__e4m3_sat8(_mm256_div_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, h)), s));
        __m256i q1 = wsync__e4m3_sat8(_mm256_div_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, h)), s));
        __m256i p = _mm256_packs_epi32(q0, q1);
        p = _mm256_permute4x64_epi64(_mm256_packus_epi16(p, p), 0x08);
        _mm_storeu_si128((__m128i *)(void *)(out + c), _mm256_castsi256_si128(p));
    }
    return c;
}
#endif
#else
#define WSYNC__QSSE2 0
#endif

/* One tile's scale: amax / 448, or 1 for a tile of zeros or one holding a
   non-finite value (saturation then clamps infinities, NaN stays NaN).
   The largest magnitude is the largest of the bf16 bits without the sign
   (an integer max: signed 16-bit lanes hold them, at most 0x7FFF); 0x7F80
   and up is infinity or NaN. */
static float wsync__quant_tile_scale(const uint16_t *bf16, uint64_t stride, uint64_t r0, uint64_t r1, uint64_t c0,
                                     uint64_t c1)
{
    uint64_t r, c;
    uint16_t m = 0;
#if WSYNC__QSSE2
    __m128i v = _mm_setzero_si128();
    uint16_t lanes[8];
#endif
    for (r = r0; r < r1; r++) {
        const uint16_t *in = bf16 + r * stride;
        c = c0;
#if WSYNC__QSSE2
        for (; c + 8 <= c1; c += 8)
            v = _mm_max_epi16(v, _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(in + c)),
                                               _mm_set1_epi16(0x7FFF)));
#endif
        for (; c < c1; c++) {
            uint16_t a = (uint16_t)(in[c] & 0x7FFFu);
            m = a > m ? a : m;
        }
    }
#if WSYNC__QSSE2
    _mm_storeu_si128((__m128i *)(void *)lanes, v);
    for (c = 0; c < 8; c++) m = lanes[c] > m ? lanes[c] : m;
#endif
    if (m >= 0x7F80u) return 1.0f;
    return m ? wsync__quant_bf16_f32(m) / 448.0f : 1.0f;
}

/* Whether the AVX2 loop runs: asked of the CPU once. */
static int wsync__quant_wide(void)
{
#if WSYNC__QSSE2 && defined(__GNUC__)
    int avx2 = __atomic_load_n(&wsync__quant_avx2, __ATOMIC_RELAXED);
    if (avx2 < 0) {
        avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
        __atomic_store_n(&wsync__quant_avx2, avx2, __ATOMIC_RELAXED);
    }
    return avx2;
#else
    return 0;
#endif
}

/* One row's columns of a tile; wide: the AVX2 loop first. */
static void wsync__quant_row(const uint16_t *in, uint8_t *out, uint64_t n, float scale, int wide)
{
    uint64_t c = 0;
    (void)wide;
#if WSYNC__QSSE2
    const __m128 s = _mm_set1_ps(scale);
    const __m128i z = _mm_setzero_si128();
#if defined(__GNUC__)
    if (wide) c = wsync__quant_row_avx2(in, out, n, scale);
#endif
    for (; c + 8 <= n; c += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(in + c)); /* bf16 -> f32: the bits << 16 */
        __m128i q0 = wsync__e4m3_sat4(_mm_div_ps(_mm_castsi128_ps(_mm_unpacklo_epi16(z, h)), s));
        __m128i q1 = wsync__e4m3_sat4(_mm_div_ps(_mm_castsi128_ps(_mm_unpackhi_epi16(z, h)), s));
        __m128i p = _mm_packs_epi32(q0, q1); /* codes 0-255: no saturation */
        _mm_storel_epi64((__m128i *)(void *)(out + c), _mm_packus_epi16(p, p));
    }
#endif
    for (; c < n; c++) out[c] = wsync__e4m3_sat(wsync__quant_bf16_f32(in[c]) / scale);
}

WSYNC_DEF wsync_result wsync_quantize_e4m3(const uint16_t *bf16, uint64_t rows, uint64_t cols, uint64_t stride,
                                           uint64_t block, uint8_t *dst, float *scales, wsync_error *err)
{
    uint64_t br = block ? block : rows, bc = block ? block : cols, tcols, r0, c0, r;
    int wide = wsync__quant_wide();
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!scales || stride < cols)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "quantize: no scales, or a stride below the columns");
    if (rows == 0 || cols == 0) {
        if (!block) scales[0] = 1.0f;
        return WSYNC_OK;
    }
    if (!bf16 || !dst) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "quantize: buffers");
    if (rows > UINT64_MAX / stride) return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "%s", "quantize: size");
    tcols = (cols + bc - 1) / bc;
    for (r0 = 0; r0 < rows; r0 += br) {
        uint64_t r1 = rows - r0 > br ? r0 + br : rows;
        for (c0 = 0; c0 < cols; c0 += bc) {
            uint64_t c1 = cols - c0 > bc ? c0 + bc : cols;
            float scale = wsync__quant_tile_scale(bf16, stride, r0, r1, c0, c1);
            scales[(r0 / br) * tcols + c0 / bc] = scale;
            for (r = r0; r < r1; r++)
                wsync__quant_row(bf16 + r * stride + c0, dst + r * cols + c0, c1 - c0, scale, wide);
        }
    }
    return WSYNC_OK;
}

#if WSYNC__RDMA_OK

typedef struct wsync__exec {
    const wsync_exec_options *o;
    const wsync_exec_task *tasks;
    size_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* any change: a queue grew, a task left, a failure */
    size_t next[WSYNC_EXEC_STAGES_MAX + 1]; /* next[k]: tasks that entered stage k (next[n_stages]: left) */
    uint64_t *off;             /* each task's offset in the arena */
    uint64_t head, tail, used; /* the ring: bytes [tail, head) modulo wrap are held */
    uint64_t wrap_at;          /* where the ring wrapped (bytes after it unused), or 0 */
    unsigned active;
    int failed;
    double group_t0;           /* when the current group's first task entered (pacing) */
    wsync_error err;
    wsync_exec_stats st;
} wsync__exec;

static double wsync__exec_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *wsync__exec_stage_name(const wsync_exec_options *o, unsigned k, char *buf, size_t cap)
{
    if (o->stage_names[k]) return o->stage_names[k];
    snprintf(buf, cap, "stage %u", k);
    return buf;
}

/* Under mu: where `need` contiguous bytes fit in the ring, or UINT64_MAX
   to wait. Held bytes are [tail, head), or [tail, wrap_at) and [0, head)
   once the newest allocations wrapped to the start (wrap_at != 0). */
static uint64_t wsync__exec_fit(wsync__exec *x, uint64_t need)
{
    uint64_t cap = x->o->staging_len;
    if (need == 0) return 0;
    if (x->used == 0) {
        x->head = x->tail = x->wrap_at = 0;
        return 0;
    }
    if (!x->wrap_at) {
        if (cap - x->head >= need) return x->head;
        if (x->tail >= need) { /* the end is too short: wrap, leaving it unused */
            x->wrap_at = x->head;
            x->head = 0;
            return 0;
        }
        return UINT64_MAX;
    }
    return x->tail - x->head >= need ? x->head : UINT64_MAX;
}

/* Under mu: task i left the last stage; its bytes return to the ring. */
static void wsync__exec_release(wsync__exec *x, size_t i)
{
    uint64_t b = x->tasks[i].tmp_bytes;
    if (b == 0) return;
    x->used -= b;
    x->tail = x->off[i] + b;
    if (x->wrap_at && x->tail == x->wrap_at) { /* the older part is gone: unwrapped again */
        x->tail = 0;
        x->wrap_at = 0;
    }
    if (x->used == 0) x->head = x->tail = x->wrap_at = 0;
}

typedef struct wsync__exec_worker {
    wsync__exec *x;
    unsigned k;
    pthread_t th;
} wsync__exec_worker;

static void *wsync__exec_main(void *p)
{
    wsync__exec_worker *w = (wsync__exec_worker *)p;
    wsync__exec *x = w->x;
    const wsync_exec_options *o = x->o;
    unsigned k = w->k, last = o->n_stages - 1;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        size_t i;
        wsync_result r = WSYNC_OK;
        wsync_error e;
        double t0, at;
        int skip;
        /* task next[k + 1] is ready for stage k once it left stage k - 1 */
        while (x->next[k + 1] < x->n && x->next[k + 1] >= x->next[k]) pthread_cond_wait(&x->cv, &x->mu);
        if (x->next[k + 1] >= x->n) break;
        i = x->next[k + 1];
        x->active++;
        if (x->active > x->st.peak_active) x->st.peak_active = x->active;
        skip = x->failed; /* after a failure tasks drain without work */
        at = k == last && x->tasks[i].start_s > 0 ? x->group_t0 + x->tasks[i].start_s : 0;
        pthread_mutex_unlock(&x->mu);
        t0 = wsync__exec_now();
        if (!skip && at > t0) { /* paced: not before its planned start */
            double pw = at - t0;
            struct timespec ts;
            ts.tv_sec = (time_t)pw;
            ts.tv_nsec = (long)((pw - (double)ts.tv_sec) * 1e9);
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
            t0 = wsync__exec_now();
            pthread_mutex_lock(&x->mu);
            x->st.pace_s += pw;
            skip = x->failed;
            pthread_mutex_unlock(&x->mu);
        }
        if (!skip) {
            wsync_error_set(&e, WSYNC_OK, NULL);
            r = o->stages[k](o->user, &x->tasks[i], o->staging ? o->staging + x->off[i] : NULL, x->off[i], &e);
        }
        pthread_mutex_lock(&x->mu);
        x->st.busy_s[k] += wsync__exec_now() - t0;
        x->active--;
        if (r != WSYNC_OK && !x->failed) {
            char nb[16];
            x->failed = 1;
            wsync_error_set(&x->err, r, "task %zu, %s: %.300s", i, wsync__exec_stage_name(o, k, nb, sizeof nb),
                             e.message[0] ? e.message : wsync_result_str(r));
        }
        x->next[k + 1] = i + 1;
        if (k == last) wsync__exec_release(x, i);
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

static wsync_result wsync__exec_check(const wsync_exec_options *o, const wsync_exec_task *tasks, size_t n,
                                      wsync_error *err)
{
    size_t i;
    unsigned k;
    if (!o || (n && !tasks)) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "exec: options and tasks");
    if (o->n_stages < 1 || o->n_stages > WSYNC_EXEC_STAGES_MAX)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "exec: %u stages (1 to %u)", o->n_stages,
                                WSYNC_EXEC_STAGES_MAX);
    for (k = 0; k < o->n_stages; k++)
        if (!o->stages[k])
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "exec: stage %u has no function", k);
    for (i = 0; i < n; i++) {
        if (tasks[i].tmp_bytes > o->staging_len || (tasks[i].tmp_bytes && !o->staging))
            return wsync_error_set(err, WSYNC_ERR_LIMIT,
                                    "exec: task %zu needs %llu staging bytes, more than the watermark of %llu", i,
                                    (unsigned long long)tasks[i].tmp_bytes, (unsigned long long)o->staging_len);
        if (!(tasks[i].start_s >= 0 && tasks[i].start_s <= 86400))
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                    "exec: task %zu: planned start %g s (0 to 86400)", i, tasks[i].start_s);
        if (i && tasks[i].group < tasks[i - 1].group)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                    "exec: task %zu is in mesh group %u after group %u (groups ascend)", i,
                                    (unsigned)tasks[i].group, (unsigned)tasks[i - 1].group);
    }
    return WSYNC_OK;
}

/* The admitting thread (the caller's): tasks enter stage 0 while the
   watermark allows, and groups wait for the barrier. */
static void wsync__exec_admit(wsync__exec *x)
{
    const wsync_exec_options *o = x->o;
    size_t i;
    pthread_mutex_lock(&x->mu);
    for (i = 0; i < x->n && !x->failed; i++) {
        uint64_t at;
        double t0 = wsync__exec_now();
        if (i && x->tasks[i].group != x->tasks[i - 1].group) {
            wsync_error e;
            wsync_result r = WSYNC_OK;
            while (x->next[o->n_stages] < i && !x->failed) pthread_cond_wait(&x->cv, &x->mu);
            if (x->failed) break;
            x->st.groups++;
            if (o->barrier) {
                pthread_mutex_unlock(&x->mu);
                wsync_error_set(&e, WSYNC_OK, NULL);
                r = o->barrier(o->user, x->tasks[i - 1].group, &e);
                pthread_mutex_lock(&x->mu);
            }
            if (r != WSYNC_OK) {
                x->failed = 1;
                wsync_error_set(&x->err, r, "barrier after mesh group %u: %.300s", (unsigned)x->tasks[i - 1].group,
                                 e.message[0] ? e.message : wsync_result_str(r));
                break;
            }
        }
        while ((at = wsync__exec_fit(x, x->tasks[i].tmp_bytes)) == UINT64_MAX && !x->failed)
            pthread_cond_wait(&x->cv, &x->mu);
        x->st.wait_s += wsync__exec_now() - t0;
        if (x->failed) break;
        x->off[i] = at;
        if (i == 0 || x->tasks[i].group != x->tasks[i - 1].group) x->group_t0 = wsync__exec_now();
        if (x->tasks[i].tmp_bytes) x->head = at + x->tasks[i].tmp_bytes;
        x->used += x->tasks[i].tmp_bytes;
        if (x->used > x->st.peak_tmp_bytes) x->st.peak_tmp_bytes = x->used;
        x->next[0] = i + 1;
        pthread_cond_broadcast(&x->cv);
    }
    /* after a failure the stages drain what entered, and end there */
    if (x->failed) {
        x->n = x->next[0];
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
}

WSYNC_DEF wsync_result wsync_exec_run(const wsync_exec_options *opt, const wsync_exec_task *tasks, size_t n,
                                      wsync_exec_stats *stats, wsync_error *err)
{
    wsync__exec x;
    wsync__exec_worker w[WSYNC_EXEC_STAGES_MAX];
    unsigned k, started = 0;
    double t0 = wsync__exec_now();
    wsync_result r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (stats) memset(stats, 0, sizeof *stats);
    if ((r = wsync__exec_check(opt, tasks, n, err)) != WSYNC_OK) return r;
    memset(&x, 0, sizeof x);
    x.o = opt;
    x.tasks = tasks;
    x.n = n;
    if (!(x.off = (uint64_t *)wsync__rdma_alloc(&opt->allocator, (n ? n : 1) * sizeof *x.off)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "exec: %zu tasks", n);
    pthread_mutex_init(&x.mu, NULL);
    pthread_cond_init(&x.cv, NULL);
    for (k = 0; k < opt->n_stages; k++) {
        w[k].x = &x;
        w[k].k = k;
        if (pthread_create(&w[k].th, NULL, wsync__exec_main, &w[k]) != 0) {
            pthread_mutex_lock(&x.mu);
            x.failed = 1;
            wsync_error_set(&x.err, WSYNC_ERR_IO, "%s", "exec: pthread_create");
            pthread_mutex_unlock(&x.mu);
            break;
        }
        started++;
    }
    if (started == opt->n_stages) wsync__exec_admit(&x);
    else {
        pthread_mutex_lock(&x.mu);
        x.n = x.next[0];
        pthread_cond_broadcast(&x.cv);
        pthread_mutex_unlock(&x.mu);
    }
    for (k = 0; k < started; k++) pthread_join(w[k].th, NULL);
    if (!x.failed && n) x.st.groups++;
    x.st.tasks = x.next[opt->n_stages];
    x.st.wall_s = wsync__exec_now() - t0;
    if (stats) *stats = x.st;
    r = x.failed ? x.err.code : WSYNC_OK;
    if (x.failed && err) *err = x.err;
    pthread_cond_destroy(&x.cv);
    pthread_mutex_destroy(&x.mu);
    wsync__rdma_free(&opt->allocator, x.off);
    return r;
}

#else /* !WSYNC__RDMA_OK */

WSYNC_DEF wsync_result wsync_exec_run(const wsync_exec_options *opt, const wsync_exec_task *tasks, size_t n,
                                      wsync_exec_stats *stats, wsync_error *err)
{
    (void)opt;
    (void)tasks;
    (void)n;
    if (stats) memset(stats, 0, sizeof *stats);
    return wsync__rdma_no(err, "the executor");
}

#endif

/* ======================================================================
   IMPLEMENTATION: the sparse step's slots  >>sparse
   ====================================================================== */

static uint64_t wsync__sp_pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

WSYNC_DEF uint64_t wsync_sparse_slot_bytes(uint64_t len, uint32_t n_trainers)
{
    uint64_t s;
    if (n_trainers == 0) return 0;
    s = (len / n_trainers) & ~(uint64_t)63;
    return s >= WSYNC_SPARSE_HEADER ? s : 0;
}

WSYNC_DEF uint64_t wsync_sparse_section_bytes(uint32_t elem, uint64_t count)
{
    return WSYNC_SPARSE_SECTION + wsync__sp_pad8(count * 4) + wsync__sp_pad8(count * elem);
}

WSYNC_DEF void wsync_sparse_begin(wsync_sparse_writer *w, uint8_t *buf, uint64_t cap, uint64_t step, uint64_t base,
                                  uint32_t sender)
{
    memset(w, 0, sizeof *w);
    w->buf = buf;
    w->cap = cap;
    w->used = WSYNC_SPARSE_HEADER;
    w->step = step;
    w->base = base;
    w->sender = sender;
}

WSYNC_DEF wsync_result wsync_sparse_section(wsync_sparse_writer *w, uint32_t region, uint32_t elem, uint64_t origin,
                                            uint64_t count, uint32_t **pos, uint8_t **values, wsync_error *err)
{
    uint64_t need;
    uint8_t *s;
    if (!w || !pos || !values || count == 0 || count > 0xFFFFFFFFull || (elem != 1 && elem != 2 && elem != 4 && elem != 8))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "sparse section: %llu changes of %u-byte elements",
                                (unsigned long long)count, (unsigned)elem);
    need = wsync_sparse_section_bytes(elem, count);
    if (w->used > w->cap || need > w->cap - w->used)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "sparse section: %llu bytes with %llu of %llu used",
                                (unsigned long long)need, (unsigned long long)w->used, (unsigned long long)w->cap);
    s = w->buf + w->used;
    memset(s, 0, WSYNC_SPARSE_SECTION);
    wsync__rdma_put32(s, region);
    wsync__rdma_put32(s + 4, elem);
    wsync__rdma_put64(s + 8, origin);
    wsync__rdma_put64(s + 16, count);
    s += WSYNC_SPARSE_SECTION;
    /* the pads are zero (the receiver checks them) */
    memset(s + wsync__sp_pad8(count * 4) - 8, 0, 8);
    memset(s + wsync__sp_pad8(count * 4) + wsync__sp_pad8(count * elem) - 8, 0, 8);
    *pos = (uint32_t *)(void *)s;
    *values = s + wsync__sp_pad8(count * 4);
    w->used += need;
    w->sections++;
    w->changes += count;
    return WSYNC_OK;
}

WSYNC_DEF uint64_t wsync_sparse_finish(wsync_sparse_writer *w)
{
    uint8_t *h = w->buf;
    memset(h, 0, WSYNC_SPARSE_HEADER);
    wsync__rdma_put32(h, WSYNC_SPARSE_MAGIC);
    h[4] = (uint8_t)WSYNC_SPARSE_VERSION;
    wsync__rdma_put64(h + 8, w->step);
    wsync__rdma_put64(h + 16, w->sections ? w->base : 0);
    wsync__rdma_put32(h + 24, w->sender);
    wsync__rdma_put32(h + 28, w->sections);
    wsync__rdma_put64(h + 32, w->used - WSYNC_SPARSE_HEADER);
    wsync__rdma_put64(h + 40, wsync_digest(h + WSYNC_SPARSE_HEADER, (size_t)(w->used - WSYNC_SPARSE_HEADER)));
    return w->used;
}

static int wsync__sp_zero(const uint8_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static wsync_result wsync__sp_bad(wsync_error *err, const wsync_sparse_expect *x, uint64_t at, const char *fmt, ...)
{
    char what[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return wsync_error_set(err, WSYNC_ERR_CORRUPT, "staging slot of trainer %u for step %llu, byte %llu: %s",
                            (unsigned)x->sender, (unsigned long long)x->step, (unsigned long long)at, what);
}

WSYNC_DEF wsync_result wsync_sparse_validate(const uint8_t *slot, uint64_t cap, const wsync_sparse_expect *x,
                                             wsync_sparse_info *info, wsync_error *err)
{
    uint64_t bytes, at, changes = 0, step, base;
    uint32_t n, i;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (info) memset(info, 0, sizeof *info);
    if (!slot || !x || (x->n_regions && !x->region_len))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "sparse validate: slot and expectations");
    if (cap < WSYNC_SPARSE_HEADER) return wsync__sp_bad(err, x, 0, "a slot of %llu bytes holds no header", (unsigned long long)cap);
    if (wsync__rdma_get32(slot) != WSYNC_SPARSE_MAGIC)
        return wsync__sp_bad(err, x, 0, "no slot header (magic %08x; the trainer wrote nothing this step?)",
                             (unsigned)wsync__rdma_get32(slot));
    if (slot[4] != WSYNC_SPARSE_VERSION || slot[5] || slot[6] || slot[7])
        return wsync__sp_bad(err, x, 4, "version %u, not %u", (unsigned)(slot[4] | slot[5] << 8), WSYNC_SPARSE_VERSION);
    step = wsync__rdma_get64(slot + 8);
    base = wsync__rdma_get64(slot + 16);
    n = wsync__rdma_get32(slot + 28);
    bytes = wsync__rdma_get64(slot + 32);
    if (step != x->step)
        return wsync__sp_bad(err, x, 8, "written for step %llu (a stale slot)", (unsigned long long)step);
    if (wsync__rdma_get32(slot + 24) != x->sender)
        return wsync__sp_bad(err, x, 24, "names sender %u", (unsigned)wsync__rdma_get32(slot + 24));
    if (n && base != x->base)
        return wsync__sp_bad(err, x, 16, "changes against step %llu, but this rank holds step %llu",
                             (unsigned long long)base, (unsigned long long)x->base);
    if (!n && base) return wsync__sp_bad(err, x, 16, "base %llu without sections", (unsigned long long)base);
    if (!wsync__sp_zero(slot + 48, 16)) return wsync__sp_bad(err, x, 48, "%s", "reserved bytes not zero");
    if (bytes > cap - WSYNC_SPARSE_HEADER)
        return wsync__sp_bad(err, x, 32, "%llu bytes of sections, over the slot's %llu (the watermark)",
                             (unsigned long long)bytes, (unsigned long long)(cap - WSYNC_SPARSE_HEADER));
    if (!n && bytes) return wsync__sp_bad(err, x, 32, "%llu bytes without sections", (unsigned long long)bytes);
    if (wsync_digest(slot + WSYNC_SPARSE_HEADER, (size_t)bytes) != wsync__rdma_get64(slot + 40))
        return wsync__sp_bad(err, x, 40, "%s", "digest of the sections does not match (torn or altered)");
    at = WSYNC_SPARSE_HEADER;
    for (i = 0; i < n; i++) {
        const uint8_t *s = slot + at, *pp, *pv;
        uint32_t region, elem, prev = 0;
        uint64_t origin, count, need, left = WSYNC_SPARSE_HEADER + bytes - at, k, lim, pb, vb;
        if (left < WSYNC_SPARSE_SECTION)
            return wsync__sp_bad(err, x, 28, "%u sections, but section %u would start at byte %llu with %llu bytes left",
                                 (unsigned)n, (unsigned)i, (unsigned long long)at, (unsigned long long)left);
        region = wsync__rdma_get32(s);
        elem = wsync__rdma_get32(s + 4);
        origin = wsync__rdma_get64(s + 8);
        count = wsync__rdma_get64(s + 16);
        if (!wsync__sp_zero(s + 24, 8)) return wsync__sp_bad(err, x, at + 24, "section %u: reserved bytes not zero", (unsigned)i);
        if (elem != 1 && elem != 2 && elem != 4 && elem != 8)
            return wsync__sp_bad(err, x, at + 4, "section %u: elements of %u bytes", (unsigned)i, (unsigned)elem);
        if (region >= x->n_regions || x->region_len[region] == 0)
            return wsync__sp_bad(err, x, at, "section %u: region %u, not one this rank takes changes for (%u regions)",
                                 (unsigned)i, (unsigned)region, (unsigned)x->n_regions);
        if (count == 0 || count > (left - WSYNC_SPARSE_SECTION) / 4)
            return wsync__sp_bad(err, x, at + 16, "section %u: %llu changes in %llu bytes left (over the watermark)",
                                 (unsigned)i, (unsigned long long)count,
                                 (unsigned long long)(left - WSYNC_SPARSE_SECTION));
        need = wsync_sparse_section_bytes(elem, count);
        if (need > left)
            return wsync__sp_bad(err, x, at + 16, "section %u: %llu changes need %llu bytes, %llu left (over the watermark)",
                                 (unsigned)i, (unsigned long long)count, (unsigned long long)need,
                                 (unsigned long long)left);
        lim = x->region_len[region] / elem; /* elements of the region */
        if (origin >= lim)
            return wsync__sp_bad(err, x, at + 8, "section %u: origin element %llu outside region %u (%llu elements)",
                                 (unsigned)i, (unsigned long long)origin, (unsigned)region, (unsigned long long)lim);
        pp = s + WSYNC_SPARSE_SECTION;
        pb = wsync__sp_pad8(count * 4);
        vb = wsync__sp_pad8(count * elem);
        pv = pp + pb;
        for (k = 0; k < count; k++) {
            uint32_t p = wsync__rdma_get32(pp + 4 * k);
            if (k && p <= prev)
                return wsync__sp_bad(err, x, at + WSYNC_SPARSE_SECTION + 4 * k,
                                     "section %u: position %u after %u (not ascending)", (unsigned)i, (unsigned)p,
                                     (unsigned)prev);
            prev = p;
        }
        if (origin + prev >= lim)
            return wsync__sp_bad(err, x, at + WSYNC_SPARSE_SECTION + 4 * (count - 1),
                                 "section %u: element %llu outside region %u (%llu elements)", (unsigned)i,
                                 (unsigned long long)(origin + prev), (unsigned)region, (unsigned long long)lim);
        if (!wsync__sp_zero(pp + count * 4, (size_t)(pb - count * 4)) ||
            !wsync__sp_zero(pv + count * elem, (size_t)(vb - count * elem)))
            return wsync__sp_bad(err, x, at, "section %u: padding not zero", (unsigned)i);
        changes += count;
        at += need;
    }
    if (at != WSYNC_SPARSE_HEADER + bytes)
        return wsync__sp_bad(err, x, at, "%llu bytes after the last section", (unsigned long long)(WSYNC_SPARSE_HEADER + bytes - at));
    if (info) {
        info->bytes = WSYNC_SPARSE_HEADER + bytes;
        info->sections = n;
        info->changes = changes;
    }
    return WSYNC_OK;
}

WSYNC_DEF void wsync_sparse_scatter(const uint8_t *slot, uint8_t *const *region)
{
    uint32_t n = wsync__rdma_get32(slot + 28), i;
    const uint8_t *s = slot + WSYNC_SPARSE_HEADER;
    for (i = 0; i < n; i++) {
        uint32_t elem = wsync__rdma_get32(s + 4);
        uint64_t origin = wsync__rdma_get64(s + 8), count = wsync__rdma_get64(s + 16), k;
        const uint8_t *pp = s + WSYNC_SPARSE_SECTION, *pv = pp + wsync__sp_pad8(count * 4);
        uint8_t *base = region[wsync__rdma_get32(s)] + origin * elem;
        if (elem == 2)
            for (k = 0; k < count; k++) memcpy(base + 2 * (uint64_t)wsync__rdma_get32(pp + 4 * k), pv + 2 * k, 2);
        else
            for (k = 0; k < count; k++) memcpy(base + elem * (uint64_t)wsync__rdma_get32(pp + 4 * k), pv + elem * k, elem);
        s += wsync_sparse_section_bytes(elem, count);
    }
}

/* ======================================================================
   IMPLEMENTATION: the controller protocol, the controller and the ranks  >>ctl
   ====================================================================== */

#define WSYNC__CTL_MAGIC 0x00435357u /* "WSC" then the version byte */
#define WSYNC__CTL_MAX_TENSORS (1u << 22)
#define WSYNC__CTL_MAX_REGIONS 4096u
#define WSYNC__CTL_MAX_TRANSFERS (1u << 24)
#define WSYNC__CTL_TENSOR_TAIL 64u /* a JOIN tensor's bytes after its shape */
#define WSYNC__CTL_XFER 72u        /* an ASSIGN transfer's bytes */

/* ---- codec (no sockets: builds everywhere) >>ctl-codec ---- */

typedef struct wsync__ctl_rd {
    const uint8_t *p;
    size_t left;
    size_t at;                 /* offset of p in the payload */
} wsync__ctl_rd;


static void wsync__ctl_put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static wsync_result wsync__ctl_rd_short(wsync__ctl_rd *c, wsync_error *err, const char *what)
{
    return wsync_error_set(err, WSYNC_ERR_TRUNCATED, "control message: %s at payload byte %llu: truncated", what,
                            (unsigned long long)(c->at));
}

static int wsync__ctl_rd_take(wsync__ctl_rd *c, size_t n, const uint8_t **out)
{
    if (n > c->left) return 0;
    *out = c->p;
    c->p += n;
    c->left -= n;
    c->at += n;
    return 1;
}

#define WSYNC__CTL_RD32(c, v, what)                                                          \
    do {                                                                                 \
        const uint8_t *q_;                                                               \
        if (!wsync__ctl_rd_take((c), 4, &q_)) return wsync__ctl_rd_short((c), err, (what));          \
        (v) = wsync__rdma_get32(q_);                                                         \
    } while (0)
#define WSYNC__CTL_RD64(c, v, what)                                                          \
    do {                                                                                 \
        const uint8_t *q_;                                                               \
        if (!wsync__ctl_rd_take((c), 8, &q_)) return wsync__ctl_rd_short((c), err, (what));          \
        (v) = wsync__rdma_get64(q_);                                                         \
    } while (0)

static wsync_result wsync__ctl_bad(wsync_error *err, wsync_result code, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static wsync_result wsync__ctl_bad(wsync_error *err, wsync_result code, const char *fmt, ...)
{
    va_list ap;
    char buf[320];
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return wsync_error_set(err, code, "control message: %s", buf);
}

WSYNC_DEF wsync_result wsync_ctl_tensor_bytes(const wsync_ctl_tensor *t, uint64_t *row_bytes, uint64_t *bytes,
                                              wsync_error *err)
{
    unsigned bits, i;
    uint64_t rb, rows, cols, esz;
    if (!t) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "tensor is NULL");
    if (t->dtype == 0 || t->dtype >= (uint32_t)WSYNC_DTYPE_COUNT)
        return wsync_error_set(err, WSYNC_ERR_UNKNOWN_DTYPE, "tensor '%s': dtype %u unknown",
                                t->name ? t->name : "", (unsigned)t->dtype);
    bits = wsync_dtype_bits((wsync_dtype)t->dtype);
    if (bits == 0 || bits % 8 != 0)
        return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "tensor '%s': %s has no whole bytes per element",
                                t->name ? t->name : "", wsync_dtype_name((wsync_dtype)t->dtype));
    if (t->ndim > WSYNC_CTL_DIMS_MAX)
        return wsync_error_set(err, WSYNC_ERR_RANK_TOO_LARGE, "tensor '%s': %u dimensions (at most %u)",
                                t->name ? t->name : "", (unsigned)t->ndim, WSYNC_CTL_DIMS_MAX);
    if (t->to_dtype && t->to_dtype != t->dtype &&
        !(t->to_dtype == WSYNC_DTYPE_F8_E4M3 && t->dtype == WSYNC_DTYPE_BF16))
        return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "tensor '%s': no conversion from dtype %u to %u (only BF16 to F8_E4M3)",
                                t->name ? t->name : "", (unsigned)t->dtype, (unsigned)t->to_dtype);
    cols = 1;
    for (i = 1; i < t->ndim; i++) {
        if (t->shape[i] && cols > UINT64_MAX / t->shape[i])
            return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "tensor '%s': shape overflows", t->name ? t->name : "");
        cols *= t->shape[i];
    }
    rows = t->ndim ? t->shape[0] : 1;
    if (t->row_begin > rows || t->row_count > rows - t->row_begin)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "tensor '%s': rows %llu + %llu outside its %llu rows",
                                t->name ? t->name : "", (unsigned long long)t->row_begin,
                                (unsigned long long)t->row_count, (unsigned long long)rows);
    if (t->col_begin > cols || t->col_count > cols - t->col_begin || (t->col_count == 0 && t->col_begin))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "tensor '%s': columns %llu + %llu outside its %llu",
                                t->name ? t->name : "", (unsigned long long)t->col_begin,
                                (unsigned long long)t->col_count, (unsigned long long)cols);
    esz = t->to_dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : bits / 8;
    rb = t->col_count ? t->col_count : cols;
    if (rb > UINT64_MAX / 8 || (rows && rb * 8 > UINT64_MAX / rows))
        return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "tensor '%s': size overflows", t->name ? t->name : "");
    rb *= esz;
    if (row_bytes) *row_bytes = rb;
    if (bytes) *bytes = rb * t->row_count;
    return WSYNC_OK;
}

/* ---- the planner's input from the ranks' entries (no sockets) ---- */

typedef struct wsync__ctl_pi_ref {
    const char *name;
    uint64_t rb, rc, cb, cc;   /* rows; columns (cc: every column counted) */
    uint32_t to, block;        /* target dtype (0: as held), fp8 tile */
    uint32_t rank, entry;      /* the rank (trainers 0..T-1, then inference), its entry */
    uint32_t id;               /* the source or unit it became */
} wsync__ctl_pi_ref;

static int wsync__ctl_pi_cmp(const void *x, const void *y)
{
    const wsync__ctl_pi_ref *a = (const wsync__ctl_pi_ref *)x, *b = (const wsync__ctl_pi_ref *)y;
    int k = strcmp(a->name, b->name);
    if (k) return k;
#define WSYNC__CTL_PI_BY(f) if (a->f != b->f) return a->f < b->f ? -1 : 1
    WSYNC__CTL_PI_BY(rb);
    WSYNC__CTL_PI_BY(rc);
    WSYNC__CTL_PI_BY(cb);
    WSYNC__CTL_PI_BY(cc);
    WSYNC__CTL_PI_BY(to);
    WSYNC__CTL_PI_BY(block);
    WSYNC__CTL_PI_BY(rank);
    WSYNC__CTL_PI_BY(entry);
#undef WSYNC__CTL_PI_BY
    return 0;
}

/* Equal but for the rank and entry: the same slice. */
static int wsync__ctl_pi_same(const wsync__ctl_pi_ref *a, const wsync__ctl_pi_ref *b, int slice)
{
    if (strcmp(a->name, b->name) != 0) return 0;
    return !slice || (a->rb == b->rb && a->rc == b->rc && a->cb == b->cb && a->cc == b->cc && a->to == b->to &&
                      a->block == b->block);
}

/* (first rank, entry) of each group, to order groups by first appearance. */
typedef struct wsync__ctl_pi_first {
    uint32_t rank, entry, lo, hi; /* hi: one past the group's last ref */
} wsync__ctl_pi_first;

static int wsync__ctl_pi_first_cmp(const void *x, const void *y)
{
    const wsync__ctl_pi_first *a = (const wsync__ctl_pi_first *)x, *b = (const wsync__ctl_pi_first *)y;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return a->entry < b->entry ? -1 : a->entry > b->entry;
}

static uint64_t wsync__ctl_pi_cols(const wsync_ctl_tensor *t)
{
    uint64_t cols = 1;
    uint32_t i;
    for (i = 1; i < t->ndim; i++) cols *= t->shape[i]; /* bounded by wsync_ctl_tensor_bytes */
    return cols;
}

/* Sorts refs, cuts them into groups of equal keys and orders the groups by
   first appearance; *out gets the groups (lo, hi into refs). */
static wsync_result wsync__ctl_pi_groups(const wsync_allocator *a, wsync__ctl_pi_ref *refs, uint64_t n, int slice,
                                         wsync__ctl_pi_first **out, uint64_t *n_out, wsync_error *err)
{
    wsync__ctl_pi_first *g;
    uint64_t i, k = 0;
    qsort(refs, (size_t)n, sizeof *refs, wsync__ctl_pi_cmp);
    g = (wsync__ctl_pi_first *)wsync__rdma_alloc(a, (size_t)(n ? n : 1) * sizeof *g);
    if (!g) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan input: groups");
    for (i = 0; i < n; i++) {
        if (i == 0 || !wsync__ctl_pi_same(&refs[i - 1], &refs[i], slice)) {
            g[k].rank = refs[i].rank;
            g[k].entry = refs[i].entry;
            g[k].lo = (uint32_t)i;
            k++;
        } else if (refs[i].rank < g[k - 1].rank ||
                   (refs[i].rank == g[k - 1].rank && refs[i].entry < g[k - 1].entry)) {
            g[k - 1].rank = refs[i].rank;
            g[k - 1].entry = refs[i].entry;
        }
        g[k - 1].hi = (uint32_t)i + 1;
    }
    qsort(g, (size_t)k, sizeof *g, wsync__ctl_pi_first_cmp);
    *out = g;
    *n_out = k;
    return WSYNC_OK;
}

/* The mesh of a source held by refs[lo, hi) (sorted by rows, then rank):
   whole at consecutive ranks (a replica), or torch.chunk shards. */
static wsync_result wsync__ctl_pi_mesh(const wsync__ctl_pi_ref *refs, uint32_t lo, uint32_t hi, uint64_t rows,
                                       uint32_t T, uint32_t *ranks, wsync_plan_mesh *m, wsync_error *err)
{
    uint32_t n = hi - lo, i, j, count;
    int whole = 1;
    for (i = 0; i < n; i++) { /* the holders by rank (insertion sort: n <= T, usually few) */
        uint32_t r = refs[lo + i].rank;
        for (j = i; j > 0 && refs[lo + ranks[j - 1]].rank > r; j--) ranks[j] = ranks[j - 1];
        ranks[j] = i;
        if (refs[lo + i].rb != 0 || refs[lo + i].rc != rows) whole = 0;
    }
    for (i = 1; i < n; i++)
        if (refs[lo + ranks[i]].rank == refs[lo + ranks[i - 1]].rank)
            return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "plan input: tensor '%s': trainer rank %u holds it twice",
                                    refs[lo].name, (unsigned)refs[lo + ranks[i]].rank);
    m->first = refs[lo + ranks[0]].rank;
    if (whole) {
        if (refs[lo + ranks[n - 1]].rank - m->first != n - 1)
            return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                    "plan input: tensor '%s': held whole by trainer ranks that are not consecutive",
                                    refs[lo].name);
        m->count = n;
        m->gather = 2;
        return WSYNC_OK;
    }
    /* torch.chunk over [first, first + count): the full rest of the ranks
       first, then the fewest that fit */
    for (j = 0; j < T - m->first - n + 1; j++) {
        uint64_t chunk, parts;
        int ok;
        count = j == 0 ? T - m->first : n + j - 1; /* every rank from first on, then n, n + 1, ... */
        chunk = rows / count + (rows % count != 0);
        parts = rows / chunk + (rows % chunk != 0);
        ok = parts == n;
        for (i = 0; ok && i < n; i++) {
            const wsync__ctl_pi_ref *r = &refs[lo + ranks[i]];
            uint64_t h = r->rank - m->first, rb = h * chunk;
            ok = h < count && rb < rows && r->rb == rb && r->rc == (rows - rb < chunk ? rows - rb : chunk);
        }
        if (ok) {
            m->count = count;
            m->gather = 0;
            return WSYNC_OK;
        }
    }
    return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                            "plan input: tensor '%s': the trainers' rows are neither whole nor torch.chunk shards "
                            "of consecutive ranks", refs[lo].name);
}

WSYNC_DEF void wsync_ctl_plan_input_free(wsync_ctl_plan_input *p)
{
    if (!p) return;
    wsync__rdma_free(&p->allocator, (void *)(uintptr_t)p->input.sources);
    wsync__rdma_free(&p->allocator, (void *)(uintptr_t)p->input.meshes);
    wsync__rdma_free(&p->allocator, (void *)(uintptr_t)p->input.pieces);
    wsync__rdma_free(&p->allocator, (void *)(uintptr_t)p->input.dests);
    wsync__rdma_free(&p->allocator, (void *)(uintptr_t)p->input.units);
    wsync__rdma_free(&p->allocator, p->holder_entry);
    wsync__rdma_free(&p->allocator, p->dest_entry);
    wsync__rdma_free(&p->allocator, p->unit_block);
    memset(p, 0, sizeof *p);
}

/* wsync_ctl_plan_input_build's state, through its phases: count, index,
   sources, units. */
typedef struct wsync__ctl_pi {
    const wsync_ctl_tensor *const *tensors;
    const uint32_t *n_tensors;
    uint32_t T, n_inference;
    wsync_allocator al;
    wsync_ctl_plan_input *out;
    wsync__ctl_pi_ref *tr, *ir;   /* the trainers' and the inference ranks' entries */
    wsync__ctl_pi_first *sg, *ug; /* their groups: a source per name, a unit per distinct entry */
    uint32_t *ranks;
    uint64_t nt, ni, ns, nu, nd;
    wsync_plan_source *src;
    wsync_plan_mesh *mesh;
    wsync_plan_piece *pc;
    wsync_plan_dest *dst;
    wsync_plan_unit *un;
    uint32_t n_mesh;
} wsync__ctl_pi;

/* Every entry checked; nt, ni: the trainers' and inference ranks' entries
   that hold bytes (a trainer's gather inbox holds none). */
static wsync_result wsync__ctl_pi_count(wsync__ctl_pi *x, wsync_error *err)
{
    uint32_t i, e, T = x->T;
    wsync_result r;
    for (i = 0; i < T + x->n_inference; i++) {
        if (x->n_tensors[i] && !x->tensors[i])
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "plan input: rank %u: entries NULL", (unsigned)i);
        for (e = 0; e < x->n_tensors[i]; e++) {
            uint64_t rb = 0, b = 0;
            if ((r = wsync_ctl_tensor_bytes(&x->tensors[i][e], &rb, &b, err)) != WSYNC_OK) return r;
            if (x->tensors[i][e].name && strcmp(x->tensors[i][e].name, WSYNC_CTL_INBOX) == 0) {
                if (i >= T)
                    return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                            "plan input: inference rank %u names an entry %s, a trainer's gather "
                                            "inbox",
                                            (unsigned)(i - T), WSYNC_CTL_INBOX);
                continue; /* no tensor: the gather's memory */
            }
            if (b == 0) continue;
            if (i < T) x->nt++;
            else x->ni++;
        }
    }
    return WSYNC_OK;
}

/* The index: a ref per entry counted, trainers' in tr, inference ranks' in ir. */
static wsync_result wsync__ctl_pi_index(wsync__ctl_pi *x, wsync_error *err)
{
    uint32_t i, e, T = x->T;
    uint64_t nt = 0, ni = 0;
    x->tr = (wsync__ctl_pi_ref *)wsync__rdma_alloc(&x->al, (size_t)(x->nt ? x->nt : 1) * sizeof *x->tr);
    x->ir = (wsync__ctl_pi_ref *)wsync__rdma_alloc(&x->al, (size_t)(x->ni ? x->ni : 1) * sizeof *x->ir);
    x->ranks = (uint32_t *)wsync__rdma_alloc(&x->al, (size_t)(x->nt ? x->nt : 1) * sizeof *x->ranks);
    if (!x->tr || !x->ir || !x->ranks) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan input: index");
    for (i = 0; i < T + x->n_inference; i++)
        for (e = 0; e < x->n_tensors[i]; e++) {
            const wsync_ctl_tensor *t = &x->tensors[i][e];
            wsync__ctl_pi_ref *ref;
            uint64_t rb = 0, b = 0;
            wsync_ctl_tensor_bytes(t, &rb, &b, NULL);
            if (b == 0 || (i < T && strcmp(t->name, WSYNC_CTL_INBOX) == 0)) continue;
            ref = i < T ? &x->tr[nt++] : &x->ir[ni++];
            memset(ref, 0, sizeof *ref);
            ref->name = t->name;
            ref->rank = i;
            ref->entry = e;
            if (i < T) { /* holders: sorted by rows within a name */
                ref->rb = t->row_begin;
                continue;
            }
            ref->rb = t->row_begin;
            ref->rc = t->row_count;
            ref->cb = t->col_begin;
            ref->cc = t->col_count ? t->col_count : wsync__ctl_pi_cols(t);
            ref->to = t->to_dtype == t->dtype ? 0 : t->to_dtype;
            ref->block = ref->to ? t->block : 0;
        }
    return WSYNC_OK;
}

/* Sources: one per name the trainers hold, each with its mesh (the
   holders' rows) and the holders' entries. */
static wsync_result wsync__ctl_pi_sources(wsync__ctl_pi *x, wsync_error *err)
{
    uint32_t T = x->T;
    uint64_t k, ns;
    wsync_ctl_plan_input *out = x->out;
    wsync_result r;
    if ((r = wsync__ctl_pi_groups(&x->al, x->tr, x->nt, 0, &x->sg, &x->ns, err)) != WSYNC_OK) return r;
    ns = x->ns;
    x->src = (wsync_plan_source *)wsync__rdma_alloc(&x->al, (size_t)(ns ? ns : 1) * sizeof *x->src);
    x->mesh = (wsync_plan_mesh *)wsync__rdma_alloc(&x->al, (size_t)(ns ? ns : 1) * sizeof *x->mesh);
    out->holder_entry = (uint32_t *)wsync__rdma_alloc(&x->al, (size_t)(ns ? ns : 1) * T * sizeof(uint32_t));
    if (!x->src || !x->mesh || !out->holder_entry)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan input: sources");
    for (k = 0; k < ns * T; k++) out->holder_entry[k] = UINT32_MAX;
    for (k = 0; k < ns; k++) {
        const wsync__ctl_pi_first *g = &x->sg[k];
        const wsync_ctl_tensor *t0 = &x->tensors[x->tr[g->lo].rank][x->tr[g->lo].entry];
        wsync_plan_source *src = &x->src[k];
        wsync_plan_mesh m;
        uint32_t j, q;
        memset(&m, 0, sizeof m);
        for (j = g->lo; j < g->hi; j++) {
            wsync__ctl_pi_ref *ref = &x->tr[j];
            const wsync_ctl_tensor *t = &x->tensors[ref->rank][ref->entry];
            uint64_t cols = wsync__ctl_pi_cols(t);
            int same = t->dtype == t0->dtype && t->ndim == t0->ndim && t->group == t0->group;
            for (q = 0; same && q < t->ndim; q++) same = t->shape[q] == t0->shape[q];
            if (!same || t->dtype != WSYNC_DTYPE_BF16 || (t->col_count && t->col_count != cols) ||
                (t->to_dtype && t->to_dtype != t->dtype))
                return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                        "plan input: tensor '%s': trainer rank %u holds it %s", t->name,
                                        (unsigned)ref->rank,
                                        !same ? "in another dtype, shape or mesh group than another trainer"
                                              : "other than as bf16 rows of every column");
            ref->rc = t->row_count;
            ref->id = (uint32_t)k;
            out->holder_entry[k * T + ref->rank] = ref->entry;
        }
        src->rows = t0->ndim ? t0->shape[0] : 1;
        src->cols = wsync__ctl_pi_cols(t0);
        src->dtype = WSYNC_DTYPE_BF16;
        if ((r = wsync__ctl_pi_mesh(x->tr, g->lo, g->hi, src->rows, T, x->ranks, &m, err)) != WSYNC_OK) return r;
        m.group = t0->group;
        for (q = 0; q < x->n_mesh; q++)
            if (x->mesh[q].first == m.first && x->mesh[q].count == m.count && x->mesh[q].group == m.group &&
                x->mesh[q].gather == m.gather)
                break;
        if (q == x->n_mesh) x->mesh[x->n_mesh++] = m;
        src->mesh = q;
    }
    return WSYNC_OK;
}

/* The source a unit reads: the trainers' tensor of its name (tr is sorted
   by name), as an index into sources; UINT64_MAX when no trainer holds it. */
static uint64_t wsync__ctl_pi_source_of(const wsync__ctl_pi *x, const char *name)
{
    uint64_t lo = 0, hi = x->nt, m;
    while (lo < hi) {
        m = lo + (hi - lo) / 2;
        if (strcmp(x->tr[m].name, name) < 0) lo = m + 1;
        else hi = m;
    }
    return lo == x->nt || strcmp(x->tr[lo].name, name) != 0 ? UINT64_MAX : x->tr[lo].id;
}

/* Units: one per distinct inference entry (a piece of one source), a
   destination per rank holding it. */
static wsync_result wsync__ctl_pi_units(wsync__ctl_pi *x, wsync_error *err)
{
    uint32_t T = x->T;
    uint64_t k, nu, d = 0;
    wsync_ctl_plan_input *out = x->out;
    wsync_result r;
    if ((r = wsync__ctl_pi_groups(&x->al, x->ir, x->ni, 1, &x->ug, &x->nu, err)) != WSYNC_OK) return r;
    nu = x->nu;
    x->un = (wsync_plan_unit *)wsync__rdma_alloc(&x->al, (size_t)(nu ? nu : 1) * sizeof *x->un);
    x->pc = (wsync_plan_piece *)wsync__rdma_alloc(&x->al, (size_t)(nu ? nu : 1) * sizeof *x->pc);
    out->unit_block = (uint32_t *)wsync__rdma_alloc(&x->al, (size_t)(nu ? nu : 1) * sizeof(uint32_t));
    x->dst = (wsync_plan_dest *)wsync__rdma_alloc(&x->al, (size_t)(x->ni ? x->ni : 1) * sizeof *x->dst);
    out->dest_entry = (uint32_t *)wsync__rdma_alloc(&x->al, (size_t)(x->ni ? x->ni : 1) * sizeof(uint32_t));
    if (!x->un || !x->pc || !x->dst || !out->unit_block || !out->dest_entry)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan input: units");
    for (k = 0; k < nu; k++) {
        const wsync__ctl_pi_first *g = &x->ug[k];
        const wsync__ctl_pi_ref *ref = &x->ir[g->lo];
        const wsync_ctl_tensor *it = &x->tensors[ref->rank][ref->entry], *t0;
        wsync_plan_unit *un = &x->un[k];
        wsync_plan_piece *pc = &x->pc[k];
        uint64_t s = wsync__ctl_pi_source_of(x, it->name);
        uint32_t j, q;
        int same;
        if (s == UINT64_MAX)
            return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                    "plan input: tensor '%s' (inference rank %u): no trainer holds it", it->name,
                                    (unsigned)(ref->rank - T));
        t0 = &x->tensors[x->tr[x->sg[s].lo].rank][x->tr[x->sg[s].lo].entry];
        same = it->dtype == t0->dtype && it->ndim == t0->ndim;
        for (q = 0; same && q < it->ndim; q++) same = it->shape[q] == t0->shape[q];
        if (!same || (ref->to && !(ref->to == WSYNC_DTYPE_F8_E4M3 && it->dtype == WSYNC_DTYPE_BF16)))
            return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "plan input: tensor '%s': inference rank %u wants %s",
                                    it->name, (unsigned)(ref->rank - T),
                                    !same ? "another dtype or shape than the trainers hold"
                                          : "a conversion other than bf16 to fp8");
        pc->source = (uint32_t)s;
        pc->row0 = ref->rb;
        pc->rows = ref->rc;
        pc->col0 = ref->cb;
        pc->cols = ref->cc;
        un->first_piece = k;
        un->n_pieces = 1;
        un->first_dest = d;
        un->dtype = ref->to ? WSYNC_DTYPE_F8_E4M3 : WSYNC_DTYPE_BF16;
        out->unit_block[k] = ref->block;
        for (j = g->lo; j < g->hi; j++) { /* sorted by rank within the group */
            const wsync_ctl_tensor *t = &x->tensors[x->ir[j].rank][x->ir[j].entry];
            wsync_plan_dest *dst = &x->dst[d];
            if (j > g->lo && x->ir[j].rank == x->ir[j - 1].rank)
                return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                        "plan input: inference rank %u holds tensor '%s' twice",
                                        (unsigned)(x->ir[j].rank - T), t->name);
            dst->rank = x->ir[j].rank - T;
            dst->region = t->region;
            dst->offset = t->offset;
            dst->scale_region = t->region;
            dst->scale_offset = t->scale_offset;
            out->dest_entry[d] = x->ir[j].entry;
            d++;
        }
        un->n_dests = d - un->first_dest;
    }
    x->nd = d;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_ctl_plan_input_build(const wsync_ctl_tensor *const *tensors, const uint32_t *n_tensors,
                                                  uint32_t n_trainers, uint32_t n_inference,
                                                  const wsync_allocator *a, wsync_ctl_plan_input *out,
                                                  wsync_error *err)
{
    wsync__ctl_pi x;
    wsync_result r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan input: out");
    memset(out, 0, sizeof *out);
    if (a) out->allocator = *a;
    if (!tensors || !n_tensors || n_trainers == 0 || n_inference == 0 || n_trainers > WSYNC_CTL_MAX_RANKS ||
        n_inference > WSYNC_CTL_MAX_RANKS)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "plan input: %u trainers, %u inference ranks",
                                (unsigned)n_trainers, (unsigned)n_inference);
    memset(&x, 0, sizeof x);
    x.tensors = tensors;
    x.n_tensors = n_tensors;
    x.T = n_trainers;
    x.n_inference = n_inference;
    x.al = out->allocator;
    x.out = out;
    if ((r = wsync__ctl_pi_count(&x, err)) != WSYNC_OK) return r;
    if ((r = wsync__ctl_pi_index(&x, err)) == WSYNC_OK && (r = wsync__ctl_pi_sources(&x, err)) == WSYNC_OK &&
        (r = wsync__ctl_pi_units(&x, err)) == WSYNC_OK) {
        out->input.n_trainers = x.T;
        out->input.n_inference = n_inference;
        out->input.sources = x.src;
        out->input.n_sources = x.ns;
        out->input.meshes = x.mesh;
        out->input.n_meshes = x.n_mesh;
        out->input.pieces = x.pc;
        out->input.n_pieces = x.nu;
        out->input.dests = x.dst;
        out->input.n_dests = x.nd;
        out->input.units = x.un;
        out->input.n_units = x.nu;
        x.src = NULL;
        x.mesh = NULL;
        x.pc = NULL;
        x.dst = NULL;
        x.un = NULL;
    }
    wsync__rdma_free(&x.al, x.tr);
    wsync__rdma_free(&x.al, x.ir);
    wsync__rdma_free(&x.al, x.ranks);
    wsync__rdma_free(&x.al, x.sg);
    wsync__rdma_free(&x.al, x.ug);
    wsync__rdma_free(&x.al, x.src);
    wsync__rdma_free(&x.al, x.mesh);
    wsync__rdma_free(&x.al, x.pc);
    wsync__rdma_free(&x.al, x.dst);
    wsync__rdma_free(&x.al, x.un);
    if (r != WSYNC_OK) wsync_ctl_plan_input_free(out);
    return r;
}

static size_t wsync__ctl_text_len(const char *s)
{
    size_t n = 0;
    while (n < WSYNC_CTL_TEXT_MAX && s[n]) n++;
    return n;
}

/* DONE's bit arrays: ceil(n / 8) bytes (none for WSYNC_CTL_NAMED_ALL),
   LSB first; bits past n must be zero (one wire form per message). */
static size_t wsync__ctl_bits_len(uint32_t n)
{
    return n == WSYNC_CTL_NAMED_ALL ? 0 : ((size_t)n + 7) / 8;
}

static int wsync__ctl_bits_ok(const uint8_t *b, uint32_t n)
{
    return n == WSYNC_CTL_NAMED_ALL || n % 8 == 0 || !b || !(b[n / 8] >> (n % 8));
}

/* A descriptor as decode would read it back (encode writes every field). */
static wsync_result wsync__ctl_desc_ok(const wsync_fabric_desc *d, const char *what, uint32_t i, wsync_error *err)
{
    uint8_t w[WSYNC_FABRIC_DESC_WIRE];
    wsync_fabric_desc back;
    wsync_result r;
    if (d->n_bytes > WSYNC_FABRIC_DESC_MAX)
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS, "%s %u: %u backend bytes", what, (unsigned)i,
                              (unsigned)d->n_bytes);
    wsync_fabric_desc_encode(d, w);
    if ((r = wsync_fabric_desc_decode(w, sizeof w, &back, err)) != WSYNC_OK) {
        char why[300];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        return wsync__ctl_bad(err, r, "%s %u: %s", what, (unsigned)i, why);
    }
    return WSYNC_OK;
}

/* An entry converted to fp8 (to_dtype equal to dtype: as stored). */
static int wsync__ctl_fp8(const wsync_ctl_tensor *t)
{
    return t->to_dtype == WSYNC_DTYPE_F8_E4M3 && t->dtype == WSYNC_DTYPE_BF16;
}

/* A JOIN entry: its bytes (and an fp8 entry's scales) inside its region. */
static wsync_result wsync__ctl_tensor_ok(const wsync_ctl_tensor *t, const wsync_fabric_desc *regions,
                                         uint32_t n_regions, wsync_error *err)
{
    uint64_t bytes = 0, rb = 0, ns;
    wsync_result r;
    if ((r = wsync_ctl_tensor_bytes(t, &rb, &bytes, err)) != WSYNC_OK) {
        char why[300];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        return wsync__ctl_bad(err, r, "JOIN: %s", why);
    }
    if (t->region >= n_regions)
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS, "JOIN: tensor '%s': region %u of %u", t->name,
                              (unsigned)t->region, (unsigned)n_regions);
    if (t->group >= WSYNC_CTL_GROUPS_MAX)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "JOIN: tensor '%s': mesh group %u (at most %u groups)", t->name,
                              (unsigned)t->group, WSYNC_CTL_GROUPS_MAX);
    if (!wsync__rdma_in(t->offset, bytes, regions[t->region].len))
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                              "JOIN: tensor '%s': %llu bytes at %llu outside region %u (%llu bytes)", t->name,
                              (unsigned long long)bytes, (unsigned long long)t->offset, (unsigned)t->region,
                              (unsigned long long)regions[t->region].len);
    if (!wsync__ctl_fp8(t)) return WSYNC_OK;
    ns = wsync_quantize_scale_count(t->row_count, rb, t->block); /* rb: one byte per fp8 column */
    if (ns > UINT64_MAX / 4 || !wsync__rdma_in(t->scale_offset, ns * 4, regions[t->region].len))
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS, "JOIN: tensor '%s': %llu scales at %llu outside region %u",
                              t->name, (unsigned long long)ns, (unsigned long long)t->scale_offset, (unsigned)t->region);
    return WSYNC_OK;
}

/* An ASSIGN transfer: its rows, preparation and destination (the source is
   checked by the trainer, against its own regions). */
static wsync_result wsync__ctl_transfer_ok(const wsync_ctl_transfer *x, uint32_t i, const wsync_ctl_target *targets,
                                           uint32_t n_targets, wsync_error *err)
{
    uint64_t row_out, row_src, tlen, ns;
    if (x->target >= n_targets)
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: transfer %u: target %u of %u", (unsigned)i,
                              (unsigned)x->target, (unsigned)n_targets);
    tlen = targets[x->target].desc.len;
    if (x->len == 0 || !wsync__rdma_in(x->dst_offset, x->len, tlen))
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                              "ASSIGN: transfer %u: %llu bytes at %llu outside the target's %llu", (unsigned)i,
                              (unsigned long long)x->len, (unsigned long long)x->dst_offset, (unsigned long long)tlen);
    if (x->rows == 0 || x->len % x->rows != 0)
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "ASSIGN: transfer %u: %llu bytes in %llu rows",
                              (unsigned)i, (unsigned long long)x->len, (unsigned long long)x->rows);
    if (x->prep != WSYNC_CTL_PREP_NONE && x->prep != WSYNC_CTL_PREP_FP8)
        return wsync__ctl_bad(err, WSYNC_ERR_UNSUPPORTED, "ASSIGN: transfer %u: preparation %u", (unsigned)i,
                              (unsigned)x->prep);
    row_out = x->len / x->rows;
    if (x->prep == WSYNC_CTL_PREP_FP8 && row_out > UINT64_MAX / 2)
        return wsync__ctl_bad(err, WSYNC_ERR_OVERFLOW, "ASSIGN: transfer %u: row size", (unsigned)i);
    row_src = x->prep == WSYNC_CTL_PREP_FP8 ? row_out * 2 : row_out;
    if (x->rows > 1 && (x->src_stride < row_src || x->rows - 1 > (UINT64_MAX - row_src) / x->src_stride))
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                              "ASSIGN: transfer %u: %llu rows of %llu bytes with a stride of %llu", (unsigned)i,
                              (unsigned long long)x->rows, (unsigned long long)row_src,
                              (unsigned long long)x->src_stride);
    if (x->prep != WSYNC_CTL_PREP_FP8) return WSYNC_OK;
    ns = wsync_quantize_scale_count(x->rows, row_out, x->block);
    if (ns > UINT64_MAX / 4 || !wsync__rdma_in(x->scale_offset, ns * 4, tlen))
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                              "ASSIGN: transfer %u: %llu scales at %llu outside the target", (unsigned)i,
                              (unsigned long long)ns, (unsigned long long)x->scale_offset);
    return WSYNC_OK;
}

/* An ASSIGN's mesh groups: 1..WSYNC_CTL_GROUPS_MAX of them, transfers in
   ascending group order. */
static wsync_result wsync__ctl_groups_ok(const wsync_ctl_msg *m, uint32_t i, wsync_error *err)
{
    const wsync_ctl_transfer *x = &m->transfers[i];
    if (x->group >= m->n_groups)
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: transfer %u: mesh group %u of %u", (unsigned)i,
                              (unsigned)x->group, (unsigned)m->n_groups);
    if (i && x->group < m->transfers[i - 1].group)
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "ASSIGN: transfer %u: mesh group %u after group %u",
                              (unsigned)i, (unsigned)x->group, (unsigned)m->transfers[i - 1].group);
    if (i && x->group == m->transfers[i - 1].group && x->start_us < m->transfers[i - 1].start_us)
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER,
                              "ASSIGN: transfer %u: planned start %u us, before transfer %u's %u us in mesh group %u",
                              (unsigned)i, (unsigned)x->start_us, (unsigned)i - 1,
                              (unsigned)m->transfers[i - 1].start_us, (unsigned)x->group);
    return WSYNC_OK;
}

/* What decode checks about a JOIN's or an ASSIGN's fields, for encode. */
static wsync_result wsync__ctl_check(const wsync_ctl_msg *m, wsync_error *err)
{
    uint32_t i, lim;
    wsync_result r;
    if (m->role != WSYNC_CTL_TRAINER && m->role != WSYNC_CTL_INFERENCE)
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_ARGUMENT, "role %u", (unsigned)m->role);
    if (m->type == WSYNC_CTL_JOIN) {
        if (m->rank >= WSYNC_CTL_MAX_RANKS)
            return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "JOIN: rank %u above the limit", (unsigned)m->rank);
        for (i = 0; i < m->n_regions; i++)
            if ((r = wsync__ctl_desc_ok(&m->regions[i], "JOIN: region", i, err)) != WSYNC_OK) return r;
        for (i = 0; i < m->n_tensors; i++)
            if ((r = wsync__ctl_tensor_ok(&m->tensors[i], m->regions, m->n_regions, err)) != WSYNC_OK) return r;
        return WSYNC_OK;
    }
    if (m->n_trainers == 0 || m->n_inference == 0 || m->n_trainers > WSYNC_CTL_MAX_RANKS ||
        m->n_inference > WSYNC_CTL_MAX_RANKS)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "ASSIGN: %u trainers, %u inference ranks", (unsigned)m->n_trainers,
                              (unsigned)m->n_inference);
    lim = m->role == WSYNC_CTL_TRAINER ? m->n_trainers : m->n_inference;
    if (m->rank >= lim)
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: rank %u outside its role's %u", (unsigned)m->rank,
                              (unsigned)lim);
    for (i = 0; i < m->n_targets; i++) {
        if ((uint64_t)m->targets[i].rank >= (uint64_t)m->n_inference + m->n_trainers)
            return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                  "ASSIGN: target %u names rank %u of %u inference and %u trainer ranks", (unsigned)i,
                                  (unsigned)m->targets[i].rank, (unsigned)m->n_inference, (unsigned)m->n_trainers);
        if ((r = wsync__ctl_desc_ok(&m->targets[i].desc, "ASSIGN: target", i, err)) != WSYNC_OK) return r;
    }
    if (m->n_groups == 0 || m->n_groups > WSYNC_CTL_GROUPS_MAX)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "ASSIGN: %u mesh groups (1 to %u)", (unsigned)m->n_groups,
                              WSYNC_CTL_GROUPS_MAX);
    for (i = 0; i < m->n_transfers; i++)
        if ((r = wsync__ctl_transfer_ok(&m->transfers[i], i, m->targets, m->n_targets, err)) != WSYNC_OK ||
            (r = wsync__ctl_groups_ok(m, i, err)) != WSYNC_OK)
            return r;
    return WSYNC_OK;
}

/* Payload bytes of m; 0 and err on a field encode refuses. */
static wsync_result wsync__ctl_size(const wsync_ctl_msg *m, size_t *out, wsync_error *err)
{
    size_t n = 0, i, k;
    switch (m->type) {
    case WSYNC_CTL_JOIN:
        if (m->n_regions > WSYNC__CTL_MAX_REGIONS || m->n_tensors > WSYNC__CTL_MAX_TENSORS)
            return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "JOIN with %u regions and %u tensors is above the limits",
                                  (unsigned)m->n_regions, (unsigned)m->n_tensors);
        if ((m->n_regions && !m->regions) || (m->n_tensors && !m->tensors))
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "JOIN: NULL regions or tensors");
        n = 16 + (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE;
        for (i = 0; i < m->n_tensors; i++) {
            const wsync_ctl_tensor *t = &m->tensors[i];
            k = t->name ? strlen(t->name) : 0;
            if (k == 0 || k > WSYNC_CTL_NAME_MAX)
                return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "JOIN: tensor %zu: name of %zu bytes", i, k);
            if (t->ndim > WSYNC_CTL_DIMS_MAX)
                return wsync_error_set(err, WSYNC_ERR_RANK_TOO_LARGE, "JOIN: tensor '%s': %u dimensions", t->name,
                                        (unsigned)t->ndim);
            n += 2 + k + 4 + 4 + 8 * (size_t)t->ndim + WSYNC__CTL_TENSOR_TAIL;
        }
        break;
    case WSYNC_CTL_ASSIGN:
        if (m->n_targets > WSYNC__CTL_MAX_TRANSFERS || m->n_transfers > WSYNC__CTL_MAX_TRANSFERS)
            return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "ASSIGN with %u targets and %u transfers is above the limits",
                                  (unsigned)m->n_targets, (unsigned)m->n_transfers);
        if ((m->n_targets && !m->targets) || (m->n_transfers && !m->transfers))
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "ASSIGN: NULL targets or transfers");
        n = 28 + (size_t)m->n_targets * (8 + WSYNC_FABRIC_DESC_WIRE) + (size_t)m->n_transfers * WSYNC__CTL_XFER;
        break;
    case WSYNC_CTL_GO:
    case WSYNC_CTL_COMMIT: n = 8; break;
    case WSYNC_CTL_DONE:
        if ((m->n_named != WSYNC_CTL_NAMED_ALL && m->n_named > WSYNC__CTL_MAX_TENSORS) ||
            m->n_ran > WSYNC__CTL_MAX_TRANSFERS)
            return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "DONE naming %u tensors and %u transfers is above the limits",
                                  (unsigned)m->n_named, (unsigned)m->n_ran);
        if ((m->n_named && m->n_named != WSYNC_CTL_NAMED_ALL && !m->named) || (m->n_ran && !m->ran))
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "DONE: NULL bits");
        if (!wsync__ctl_bits_ok(m->named, m->n_named) || !wsync__ctl_bits_ok(m->ran, m->n_ran))
            return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "%s", "DONE: bits set past the count");
        n = 14 + wsync__ctl_text_len(m->text) + 12 + wsync__ctl_bits_len(m->n_named) + wsync__ctl_bits_len(m->n_ran);
        break;
    case WSYNC_CTL_ACK:
    case WSYNC_CTL_ABORT:
    case WSYNC_CTL_ERROR: n = 14 + wsync__ctl_text_len(m->text); break;
    case WSYNC_CTL_BARRIER:
    case WSYNC_CTL_RELEASE:
        if (m->group >= WSYNC_CTL_GROUPS_MAX)
            return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "mesh group %u (at most %u groups)", (unsigned)m->group,
                                  WSYNC_CTL_GROUPS_MAX);
        n = 12;
        break;
    case WSYNC_CTL_BYE: n = 0; break;
    case WSYNC_CTL_HELLO:
        if ((m->role != WSYNC_CTL_TRAINER && m->role != WSYNC_CTL_INFERENCE) || m->rank >= WSYNC_CTL_MAX_RANKS)
            return wsync__ctl_bad(err, WSYNC_ERR_INVALID_ARGUMENT, "HELLO: role %u rank %u", (unsigned)m->role,
                                  (unsigned)m->rank);
        n = 8 + WSYNC_CTL_NONCE;
        break;
    case WSYNC_CTL_CHALLENGE: n = WSYNC_CTL_NONCE + WSYNC_CTL_MAC; break;
    case WSYNC_CTL_PROOF: n = WSYNC_CTL_MAC; break;
    case WSYNC_CTL_OPEN:
        if (m->n_senders > WSYNC_CTL_MAX_RANKS)
            return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "OPEN naming %u senders (at most %u)", (unsigned)m->n_senders,
                                  WSYNC_CTL_MAX_RANKS);
        if (m->n_senders && !m->senders)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "OPEN: NULL senders");
        for (i = 1; i < m->n_senders; i++)
            if (m->senders[i] <= m->senders[i - 1])
                return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "OPEN: sender %u after %u (ascending, once each)",
                                      (unsigned)m->senders[i], (unsigned)m->senders[i - 1]);
        n = 12 + 4 * (size_t)m->n_senders;
        break;
    default: return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "encode: message type %u", (unsigned)m->type);
    }
    if (n > WSYNC_CTL_MAX_PAYLOAD)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "payload of %zu bytes is above the limit of %u", n,
                              WSYNC_CTL_MAX_PAYLOAD);
    if (m->type == WSYNC_CTL_JOIN || m->type == WSYNC_CTL_ASSIGN) {
        wsync_result r = wsync__ctl_check(m, err);
        if (r != WSYNC_OK) return r;
    }
    *out = n;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_ctl_encode(const wsync_ctl_msg *m, uint8_t *out, size_t cap, size_t *len,
                                        wsync_error *err)
{
    size_t pl = 0, i, k;
    uint8_t *p;
    wsync_result r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!m || !len) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "encode arguments");
    *len = 0;
    if ((r = wsync__ctl_size(m, &pl, err)) != WSYNC_OK) return r;
    *len = WSYNC_CTL_HEADER + pl;
    if (!out || cap < *len)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "encode: %zu bytes needed, %zu given", *len, cap);
    p = out;
    wsync__rdma_put32(p, WSYNC__CTL_MAGIC | WSYNC_CTL_VERSION << 24);
    wsync__ctl_put16(p + 4, m->type);
    wsync__ctl_put16(p + 6, 0);
    wsync__rdma_put32(p + 8, (uint32_t)pl);
    p += WSYNC_CTL_HEADER;
    switch (m->type) {
    case WSYNC_CTL_JOIN:
        wsync__rdma_put32(p, m->role);
        wsync__rdma_put32(p + 4, m->rank);
        wsync__rdma_put32(p + 8, m->n_regions);
        wsync__rdma_put32(p + 12, m->n_tensors);
        p += 16;
        for (i = 0; i < m->n_regions; i++, p += WSYNC_FABRIC_DESC_WIRE) wsync_fabric_desc_encode(&m->regions[i], p);
        for (i = 0; i < m->n_tensors; i++) {
            const wsync_ctl_tensor *t = &m->tensors[i];
            k = strlen(t->name);
            wsync__ctl_put16(p, (uint32_t)k);
            memcpy(p + 2, t->name, k);
            p += 2 + k;
            wsync__rdma_put32(p, t->dtype);
            wsync__rdma_put32(p + 4, t->ndim);
            p += 8;
            for (k = 0; k < t->ndim; k++, p += 8) wsync__rdma_put64(p, t->shape[k]);
            wsync__rdma_put64(p, t->row_begin);
            wsync__rdma_put64(p + 8, t->row_count);
            wsync__rdma_put32(p + 16, t->region);
            wsync__rdma_put64(p + 20, t->offset);
            wsync__rdma_put64(p + 28, t->col_begin);
            wsync__rdma_put64(p + 36, t->col_count);
            wsync__rdma_put32(p + 44, t->to_dtype);
            wsync__rdma_put32(p + 48, t->block);
            wsync__rdma_put64(p + 52, t->scale_offset);
            wsync__rdma_put32(p + 60, t->group);
            p += WSYNC__CTL_TENSOR_TAIL;
        }
        break;
    case WSYNC_CTL_ASSIGN:
        wsync__rdma_put32(p, m->role);
        wsync__rdma_put32(p + 4, m->rank);
        wsync__rdma_put32(p + 8, m->n_trainers);
        wsync__rdma_put32(p + 12, m->n_inference);
        wsync__rdma_put32(p + 16, m->n_targets);
        wsync__rdma_put32(p + 20, m->n_transfers);
        wsync__rdma_put32(p + 24, m->n_groups);
        p += 28;
        for (i = 0; i < m->n_targets; i++) {
            wsync__rdma_put32(p, m->targets[i].rank);
            wsync__rdma_put32(p + 4, m->targets[i].region);
            wsync_fabric_desc_encode(&m->targets[i].desc, p + 8);
            p += 8 + WSYNC_FABRIC_DESC_WIRE;
        }
        for (i = 0; i < m->n_transfers; i++, p += WSYNC__CTL_XFER) {
            const wsync_ctl_transfer *x = &m->transfers[i];
            wsync__rdma_put32(p, x->src_region);
            wsync__rdma_put32(p + 4, x->target);
            wsync__rdma_put64(p + 8, x->src_offset);
            wsync__rdma_put64(p + 16, x->dst_offset);
            wsync__rdma_put64(p + 24, x->len);
            wsync__rdma_put64(p + 32, x->rows);
            wsync__rdma_put64(p + 40, x->src_stride);
            wsync__rdma_put32(p + 48, x->prep);
            wsync__rdma_put32(p + 52, x->block);
            wsync__rdma_put64(p + 56, x->scale_offset);
            wsync__rdma_put32(p + 64, x->group);
            wsync__rdma_put32(p + 68, x->start_us);
        }
        break;
    case WSYNC_CTL_GO:
    case WSYNC_CTL_COMMIT: wsync__rdma_put64(p, m->step); break;
    case WSYNC_CTL_BARRIER:
    case WSYNC_CTL_RELEASE:
        wsync__rdma_put64(p, m->step);
        wsync__rdma_put32(p + 8, m->group);
        break;
    case WSYNC_CTL_DONE:
    case WSYNC_CTL_ACK:
    case WSYNC_CTL_ABORT:
    case WSYNC_CTL_ERROR:
        k = wsync__ctl_text_len(m->text);
        wsync__rdma_put64(p, m->step);
        wsync__rdma_put32(p + 8, m->status);
        wsync__ctl_put16(p + 12, (uint32_t)k);
        memcpy(p + 14, m->text, k);
        p += 14 + k;
        if (m->type != WSYNC_CTL_DONE) break;
        wsync__rdma_put32(p, m->n_named);
        k = wsync__ctl_bits_len(m->n_named);
        if (k) memcpy(p + 4, m->named, k);
        p += 4 + k;
        wsync__rdma_put32(p, m->n_ran);
        wsync__rdma_put32(p + 4, m->runs);
        k = wsync__ctl_bits_len(m->n_ran);
        if (k) memcpy(p + 8, m->ran, k);
        break;
    case WSYNC_CTL_HELLO:
        wsync__rdma_put32(p, m->role);
        wsync__rdma_put32(p + 4, m->rank);
        memcpy(p + 8, m->nonce, WSYNC_CTL_NONCE);
        break;
    case WSYNC_CTL_CHALLENGE:
        memcpy(p, m->nonce, WSYNC_CTL_NONCE);
        memcpy(p + WSYNC_CTL_NONCE, m->mac, WSYNC_CTL_MAC);
        break;
    case WSYNC_CTL_PROOF: memcpy(p, m->mac, WSYNC_CTL_MAC); break;
    case WSYNC_CTL_OPEN:
        wsync__rdma_put64(p, m->step);
        wsync__rdma_put32(p + 8, m->n_senders);
        for (i = 0; i < m->n_senders; i++) wsync__rdma_put32(p + 12 + 4 * i, m->senders[i]);
        break;
    default: break;
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_ctl_header(const uint8_t *h, size_t len, uint32_t *type, uint32_t *payload_len,
                                        wsync_error *err)
{
    uint32_t magic, t, pl;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!h || len < WSYNC_CTL_HEADER)
        return wsync__ctl_bad(err, WSYNC_ERR_TRUNCATED, "header of %zu bytes (%u needed)", len, WSYNC_CTL_HEADER);
    magic = wsync__rdma_get32(h);
    if ((magic & 0xFFFFFFu) != WSYNC__CTL_MAGIC)
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "%s", "bad magic (not a wsync control message)");
    if (magic >> 24 != WSYNC_CTL_VERSION)
        return wsync__ctl_bad(err, WSYNC_ERR_UNSUPPORTED, "protocol version %u (this build speaks %u)",
                              (unsigned)(magic >> 24), WSYNC_CTL_VERSION);
    t = (uint32_t)h[4] | (uint32_t)h[5] << 8;
    if (t < WSYNC_CTL_JOIN || t > WSYNC_CTL_OPEN || h[6] || h[7])
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "unknown message type %u",
                              (unsigned)wsync__rdma_get32(h + 4));
    pl = wsync__rdma_get32(h + 8);
    if (pl > WSYNC_CTL_MAX_PAYLOAD)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "payload of %u bytes is above the limit of %u", (unsigned)pl,
                              WSYNC_CTL_MAX_PAYLOAD);
    if (type) *type = t;
    if (payload_len) *payload_len = pl;
    return WSYNC_OK;
}

WSYNC_DEF void wsync_ctl_msg_free(wsync_ctl_msg *m)
{
    if (!m) return;
    if (m->storage_) wsync__rdma_free(&m->alloc_, m->storage_);
    memset(m, 0, sizeof *m);
}

static wsync_result wsync__ctl_text(wsync__ctl_rd *c, wsync_ctl_msg *m, wsync_error *err)
{
    const uint8_t *q;
    size_t k;
    WSYNC__CTL_RD64(c, m->step, "step");
    WSYNC__CTL_RD32(c, m->status, "status");
    if (!wsync__ctl_rd_take(c, 2, &q)) return wsync__ctl_rd_short(c, err, "text length");
    k = (size_t)q[0] | (size_t)q[1] << 8;
    if (k > WSYNC_CTL_TEXT_MAX)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "text of %zu bytes (at most %u)", k, WSYNC_CTL_TEXT_MAX);
    if (!wsync__ctl_rd_take(c, k, &q)) return wsync__ctl_rd_short(c, err, "text");
    if (memchr(q, 0, k)) return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "%s", "text holds a NUL byte");
    memcpy(m->text, q, k);
    m->text[k] = 0;
    return WSYNC_OK;
}

/* DONE's tail: the tensors named and the transfers run, as bits (both
   counted against the bytes present before the one allocation). */
static wsync_result wsync__ctl_done(wsync__ctl_rd *c, wsync_ctl_msg *m, wsync_error *err)
{
    const uint8_t *named = NULL, *ran = NULL;
    size_t kn, kr;
    uint8_t *mem;
    WSYNC__CTL_RD32(c, m->n_named, "tensors named");
    if (m->n_named != WSYNC_CTL_NAMED_ALL && m->n_named > WSYNC__CTL_MAX_TENSORS)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "DONE naming %u tensors (at most %u)", (unsigned)m->n_named,
                              WSYNC__CTL_MAX_TENSORS);
    kn = wsync__ctl_bits_len(m->n_named);
    if (kn && !wsync__ctl_rd_take(c, kn, &named)) return wsync__ctl_rd_short(c, err, "the tensors' bits");
    WSYNC__CTL_RD32(c, m->n_ran, "transfers");
    WSYNC__CTL_RD32(c, m->runs, "writes run");
    if (m->n_ran > WSYNC__CTL_MAX_TRANSFERS)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "DONE for %u transfers (at most %u)", (unsigned)m->n_ran,
                              WSYNC__CTL_MAX_TRANSFERS);
    kr = wsync__ctl_bits_len(m->n_ran);
    if (kr && !wsync__ctl_rd_take(c, kr, &ran)) return wsync__ctl_rd_short(c, err, "the transfers' bits");
    if (!wsync__ctl_bits_ok(named, m->n_named) || !wsync__ctl_bits_ok(ran, m->n_ran))
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "%s", "DONE: bits set past the count");
    if (!kn && !kr) return WSYNC_OK;
    if (!(mem = (uint8_t *)wsync__rdma_alloc(&m->alloc_, kn + kr)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "DONE: %zu bytes", kn + kr);
    m->storage_ = mem;
    if (kn) memcpy(m->named = mem, named, kn);
    if (kr) memcpy(m->ran = mem + kn, ran, kr);
    return WSYNC_OK;
}

/* Counts what a JOIN holds, with the bytes its names need, walking it
   once before anything is allocated. */
static wsync_result wsync__ctl_join_count(wsync__ctl_rd c, uint32_t nt, size_t *names, wsync_error *err)
{
    uint32_t i, nd;
    const uint8_t *q;
    size_t k;
    *names = 0;
    for (i = 0; i < nt; i++) {
        if (!wsync__ctl_rd_take(&c, 2, &q)) return wsync__ctl_rd_short(&c, err, "tensor name length");
        k = (size_t)q[0] | (size_t)q[1] << 8;
        if (k == 0 || k > WSYNC_CTL_NAME_MAX)
            return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "tensor %u: name of %zu bytes (1 to %u)", (unsigned)i, k,
                                  WSYNC_CTL_NAME_MAX);
        if (!wsync__ctl_rd_take(&c, k + 4, &q)) return wsync__ctl_rd_short(&c, err, "tensor name");
        *names += k + 1;
        if (!wsync__ctl_rd_take(&c, 4, &q)) return wsync__ctl_rd_short(&c, err, "tensor ndim");
        nd = wsync__rdma_get32(q);
        if (nd > WSYNC_CTL_DIMS_MAX)
            return wsync__ctl_bad(err, WSYNC_ERR_RANK_TOO_LARGE, "tensor %u: %u dimensions (at most %u)", (unsigned)i,
                                  (unsigned)nd, WSYNC_CTL_DIMS_MAX);
        if (!wsync__ctl_rd_take(&c, 8 * (size_t)nd + WSYNC__CTL_TENSOR_TAIL, &q)) return wsync__ctl_rd_short(&c, err, "tensor shape and place");
    }
    if (c.left)
        return wsync__ctl_bad(err, WSYNC_ERR_TRAILING_BYTES, "%zu bytes after the last tensor", c.left);
    return WSYNC_OK;
}

static wsync_result wsync__ctl_alloc(wsync_ctl_msg *m, size_t n, wsync_error *err)
{
    m->storage_ = wsync__rdma_alloc(&m->alloc_, n);
    if (!m->storage_) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "control message: %zu bytes", n);
    return WSYNC_OK;
}

static size_t wsync__ctl_align(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static wsync_result wsync__ctl_join(wsync__ctl_rd *c, wsync_ctl_msg *m, wsync_error *err)
{
    uint32_t i, k;
    size_t names = 0, ra, ta;
    char *np;
    wsync_result r;
    WSYNC__CTL_RD32(c, m->role, "role");
    WSYNC__CTL_RD32(c, m->rank, "rank");
    WSYNC__CTL_RD32(c, m->n_regions, "region count");
    WSYNC__CTL_RD32(c, m->n_tensors, "tensor count");
    if (m->role != WSYNC_CTL_TRAINER && m->role != WSYNC_CTL_INFERENCE)
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "JOIN: role %u (1 trainer, 2 inference)",
                              (unsigned)m->role);
    if (m->rank >= WSYNC_CTL_MAX_RANKS)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "JOIN: rank %u above the limit", (unsigned)m->rank);
    if (m->n_regions > WSYNC__CTL_MAX_REGIONS || m->n_tensors > WSYNC__CTL_MAX_TENSORS)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "JOIN: %u regions, %u tensors: above the limits",
                              (unsigned)m->n_regions, (unsigned)m->n_tensors);
    /* every count is checked against the bytes it needs before allocating */
    if ((size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE > c->left) return wsync__ctl_rd_short(c, err, "regions");
    if ((size_t)m->n_tensors * (10 + WSYNC__CTL_TENSOR_TAIL) > c->left - (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE)
        return wsync__ctl_rd_short(c, err, "tensors");
    {
        wsync__ctl_rd t = *c;
        t.p += (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE;
        t.left -= (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE;
        t.at += (size_t)m->n_regions * WSYNC_FABRIC_DESC_WIRE;
        if ((r = wsync__ctl_join_count(t, m->n_tensors, &names, err)) != WSYNC_OK) return r;
    }
    ra = wsync__ctl_align((size_t)m->n_regions * sizeof(wsync_fabric_desc));
    ta = wsync__ctl_align((size_t)m->n_tensors * sizeof(wsync_ctl_tensor));
    if ((r = wsync__ctl_alloc(m, ra + ta + names, err)) != WSYNC_OK) return r;
    m->regions = m->n_regions ? (wsync_fabric_desc *)m->storage_ : NULL;
    m->tensors = m->n_tensors ? (wsync_ctl_tensor *)((uint8_t *)m->storage_ + ra) : NULL;
    np = (char *)m->storage_ + ra + ta;
    for (i = 0; i < m->n_regions; i++) {
        const uint8_t *q = NULL;
        if (!wsync__ctl_rd_take(c, WSYNC_FABRIC_DESC_WIRE, &q)) return wsync__ctl_rd_short(c, err, "region");
        if ((r = wsync_fabric_desc_decode(q, WSYNC_FABRIC_DESC_WIRE, &m->regions[i], err)) != WSYNC_OK) {
            char why[300];
            snprintf(why, sizeof why, "%.250s", err ? err->message : "");
            return wsync__ctl_bad(err, r, "JOIN: region %u: %s", (unsigned)i, why);
        }
    }
    for (i = 0; i < m->n_tensors; i++) {
        wsync_ctl_tensor *t = &m->tensors[i];
        const uint8_t *q = NULL;
        size_t nl;
        if (!wsync__ctl_rd_take(c, 2, &q)) return wsync__ctl_rd_short(c, err, "tensor name length");
        nl = (size_t)q[0] | (size_t)q[1] << 8;
        if (!wsync__ctl_rd_take(c, nl, &q)) return wsync__ctl_rd_short(c, err, "tensor name");
        if (memchr(q, 0, nl))
            return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "JOIN: tensor %u: NUL in its name", i);
        memcpy(np, q, nl);
        np[nl] = 0;
        t->name = np;
        np += nl + 1;
        WSYNC__CTL_RD32(c, t->dtype, "dtype");
        WSYNC__CTL_RD32(c, t->ndim, "ndim");
        for (k = 0; k < t->ndim; k++) WSYNC__CTL_RD64(c, t->shape[k], "shape");
        WSYNC__CTL_RD64(c, t->row_begin, "row_begin");
        WSYNC__CTL_RD64(c, t->row_count, "row_count");
        WSYNC__CTL_RD32(c, t->region, "region");
        WSYNC__CTL_RD64(c, t->offset, "offset");
        WSYNC__CTL_RD64(c, t->col_begin, "col_begin");
        WSYNC__CTL_RD64(c, t->col_count, "col_count");
        WSYNC__CTL_RD32(c, t->to_dtype, "to_dtype");
        WSYNC__CTL_RD32(c, t->block, "block");
        WSYNC__CTL_RD64(c, t->scale_offset, "scale_offset");
        WSYNC__CTL_RD32(c, t->group, "group");
        if ((r = wsync__ctl_tensor_ok(t, m->regions, m->n_regions, err)) != WSYNC_OK) return r;
    }
    return WSYNC_OK;
}

static wsync_result wsync__ctl_assign(wsync__ctl_rd *c, wsync_ctl_msg *m, wsync_error *err)
{
    uint32_t i;
    size_t ga, need;
    wsync_result r;
    WSYNC__CTL_RD32(c, m->role, "role");
    WSYNC__CTL_RD32(c, m->rank, "rank");
    WSYNC__CTL_RD32(c, m->n_trainers, "trainer count");
    WSYNC__CTL_RD32(c, m->n_inference, "inference count");
    WSYNC__CTL_RD32(c, m->n_targets, "target count");
    WSYNC__CTL_RD32(c, m->n_transfers, "transfer count");
    WSYNC__CTL_RD32(c, m->n_groups, "group count");
    if (m->role != WSYNC_CTL_TRAINER && m->role != WSYNC_CTL_INFERENCE)
        return wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "ASSIGN: role %u", (unsigned)m->role);
    if (m->n_groups == 0 || m->n_groups > WSYNC_CTL_GROUPS_MAX)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "ASSIGN: %u mesh groups (1 to %u)", (unsigned)m->n_groups,
                              WSYNC_CTL_GROUPS_MAX);
    if (m->n_trainers == 0 || m->n_inference == 0 || m->n_trainers > WSYNC_CTL_MAX_RANKS ||
        m->n_inference > WSYNC_CTL_MAX_RANKS)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "ASSIGN: %u trainers, %u inference ranks",
                              (unsigned)m->n_trainers, (unsigned)m->n_inference);
    if (m->rank >= (m->role == WSYNC_CTL_TRAINER ? m->n_trainers : m->n_inference))
        return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS, "ASSIGN: rank %u outside its role's %u", (unsigned)m->rank,
                              (unsigned)(m->role == WSYNC_CTL_TRAINER ? m->n_trainers : m->n_inference));
    if (m->n_targets > WSYNC__CTL_MAX_TRANSFERS || m->n_transfers > WSYNC__CTL_MAX_TRANSFERS)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "%s", "ASSIGN: counts above the limits");
    need = (size_t)m->n_targets * (8 + WSYNC_FABRIC_DESC_WIRE) + (size_t)m->n_transfers * WSYNC__CTL_XFER;
    if (need > c->left) return wsync__ctl_rd_short(c, err, "targets and transfers");
    if (need < c->left)
        return wsync__ctl_bad(err, WSYNC_ERR_TRAILING_BYTES, "ASSIGN: %zu bytes after the last transfer",
                              c->left - need);
    ga = wsync__ctl_align((size_t)m->n_targets * sizeof(wsync_ctl_target));
    if ((r = wsync__ctl_alloc(m, ga + (size_t)m->n_transfers * sizeof(wsync_ctl_transfer), err)) != WSYNC_OK)
        return r;
    m->targets = m->n_targets ? (wsync_ctl_target *)m->storage_ : NULL;
    m->transfers = m->n_transfers ? (wsync_ctl_transfer *)((uint8_t *)m->storage_ + ga) : NULL;
    for (i = 0; i < m->n_targets; i++) {
        wsync_ctl_target *g = &m->targets[i];
        const uint8_t *q = NULL;
        WSYNC__CTL_RD32(c, g->rank, "target rank");
        WSYNC__CTL_RD32(c, g->region, "target region");
        if ((uint64_t)g->rank >= (uint64_t)m->n_inference + m->n_trainers)
            return wsync__ctl_bad(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                  "ASSIGN: target %u names rank %u of %u inference and %u trainer ranks", (unsigned)i,
                                  (unsigned)g->rank, (unsigned)m->n_inference, (unsigned)m->n_trainers);
        if (!wsync__ctl_rd_take(c, WSYNC_FABRIC_DESC_WIRE, &q)) return wsync__ctl_rd_short(c, err, "target descriptor");
        if ((r = wsync_fabric_desc_decode(q, WSYNC_FABRIC_DESC_WIRE, &g->desc, err)) != WSYNC_OK) {
            char why[300];
            snprintf(why, sizeof why, "%.250s", err ? err->message : "");
            return wsync__ctl_bad(err, r, "ASSIGN: target %u: %s", (unsigned)i, why);
        }
    }
    for (i = 0; i < m->n_transfers; i++) {
        wsync_ctl_transfer *x = &m->transfers[i];
        WSYNC__CTL_RD32(c, x->src_region, "src_region");
        WSYNC__CTL_RD32(c, x->target, "target");
        WSYNC__CTL_RD64(c, x->src_offset, "src_offset");
        WSYNC__CTL_RD64(c, x->dst_offset, "dst_offset");
        WSYNC__CTL_RD64(c, x->len, "len");
        WSYNC__CTL_RD64(c, x->rows, "rows");
        WSYNC__CTL_RD64(c, x->src_stride, "src_stride");
        WSYNC__CTL_RD32(c, x->prep, "prep");
        WSYNC__CTL_RD32(c, x->block, "block");
        WSYNC__CTL_RD64(c, x->scale_offset, "scale_offset");
        WSYNC__CTL_RD32(c, x->group, "group");
        WSYNC__CTL_RD32(c, x->start_us, "start_us");
        if ((r = wsync__ctl_transfer_ok(x, i, m->targets, m->n_targets, err)) != WSYNC_OK ||
            (r = wsync__ctl_groups_ok(m, i, err)) != WSYNC_OK)
            return r;
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_ctl_decode(uint32_t type, const uint8_t *payload, size_t len,
                                        const wsync_allocator *a, wsync_ctl_msg *out, wsync_error *err)
{
    wsync__ctl_rd c;
    wsync_result r = WSYNC_OK;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!out || (!payload && len)) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "decode arguments");
    memset(out, 0, sizeof *out);
    if (a) out->alloc_ = *a;
    out->type = type;
    if (len > WSYNC_CTL_MAX_PAYLOAD)
        return wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "payload of %zu bytes is above the limit", len);
    c.p = payload;
    c.left = len;
    c.at = 0;
    switch (type) {
    case WSYNC_CTL_JOIN: r = wsync__ctl_join(&c, out, err); break;
    case WSYNC_CTL_ASSIGN: r = wsync__ctl_assign(&c, out, err); break;
    case WSYNC_CTL_GO:
    case WSYNC_CTL_COMMIT: {
        const uint8_t *q;
        if (!wsync__ctl_rd_take(&c, 8, &q)) r = wsync__ctl_rd_short(&c, err, "step");
        else out->step = wsync__rdma_get64(q);
        break;
    }
    case WSYNC_CTL_DONE:
        if ((r = wsync__ctl_text(&c, out, err)) == WSYNC_OK) r = wsync__ctl_done(&c, out, err);
        break;
    case WSYNC_CTL_ACK:
    case WSYNC_CTL_ABORT:
    case WSYNC_CTL_ERROR: r = wsync__ctl_text(&c, out, err); break;
    case WSYNC_CTL_BYE: break;
    case WSYNC_CTL_HELLO: {
        const uint8_t *q;
        if (!wsync__ctl_rd_take(&c, 8 + WSYNC_CTL_NONCE, &q)) r = wsync__ctl_rd_short(&c, err, "role, rank and nonce");
        else {
            out->role = wsync__rdma_get32(q);
            out->rank = wsync__rdma_get32(q + 4);
            memcpy(out->nonce, q + 8, WSYNC_CTL_NONCE);
            if ((out->role != WSYNC_CTL_TRAINER && out->role != WSYNC_CTL_INFERENCE) ||
                out->rank >= WSYNC_CTL_MAX_RANKS)
                r = wsync__ctl_bad(err, WSYNC_ERR_INVALID_ARGUMENT, "HELLO: role %u rank %u", (unsigned)out->role,
                                   (unsigned)out->rank);
        }
        break;
    }
    case WSYNC_CTL_CHALLENGE: {
        const uint8_t *q;
        if (!wsync__ctl_rd_take(&c, WSYNC_CTL_NONCE + WSYNC_CTL_MAC, &q))
            r = wsync__ctl_rd_short(&c, err, "nonce and proof");
        else {
            memcpy(out->nonce, q, WSYNC_CTL_NONCE);
            memcpy(out->mac, q + WSYNC_CTL_NONCE, WSYNC_CTL_MAC);
        }
        break;
    }
    case WSYNC_CTL_PROOF: {
        const uint8_t *q;
        if (!wsync__ctl_rd_take(&c, WSYNC_CTL_MAC, &q)) r = wsync__ctl_rd_short(&c, err, "proof");
        else memcpy(out->mac, q, WSYNC_CTL_MAC);
        break;
    }
    case WSYNC_CTL_OPEN: {
        const uint8_t *q;
        uint32_t i;
        if (!wsync__ctl_rd_take(&c, 12, &q)) {
            r = wsync__ctl_rd_short(&c, err, "step and sender count");
            break;
        }
        out->step = wsync__rdma_get64(q);
        out->n_senders = wsync__rdma_get32(q + 8);
        if (out->n_senders > WSYNC_CTL_MAX_RANKS || c.left != 4 * (size_t)out->n_senders) {
            r = wsync__ctl_bad(err, out->n_senders > WSYNC_CTL_MAX_RANKS ? WSYNC_ERR_LIMIT : WSYNC_ERR_TRUNCATED,
                               "OPEN: %u senders in %zu bytes", (unsigned)out->n_senders, c.left);
            break;
        }
        if (out->n_senders && (r = wsync__ctl_alloc(out, 4 * (size_t)out->n_senders, err)) != WSYNC_OK) break;
        out->senders = (uint32_t *)out->storage_;
        for (i = 0; i < out->n_senders && r == WSYNC_OK; i++) {
            if (!wsync__ctl_rd_take(&c, 4, &q)) r = wsync__ctl_rd_short(&c, err, "sender");
            else if ((out->senders[i] = wsync__rdma_get32(q)) >= WSYNC_CTL_MAX_RANKS ||
                     (i && out->senders[i] <= out->senders[i - 1]))
                r = wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER,
                                   "OPEN: sender %u: trainer rank %u (ascending, once each)", (unsigned)i,
                                   (unsigned)out->senders[i]);
        }
        break;
    }
    case WSYNC_CTL_BARRIER:
    case WSYNC_CTL_RELEASE: {
        const uint8_t *q;
        if (!wsync__ctl_rd_take(&c, 12, &q)) r = wsync__ctl_rd_short(&c, err, "step and group");
        else {
            out->step = wsync__rdma_get64(q);
            out->group = wsync__rdma_get32(q + 8);
            if (out->group >= WSYNC_CTL_GROUPS_MAX)
                r = wsync__ctl_bad(err, WSYNC_ERR_LIMIT, "mesh group %u (at most %u groups)", (unsigned)out->group,
                                   WSYNC_CTL_GROUPS_MAX);
        }
        break;
    }
    default: r = wsync__ctl_bad(err, WSYNC_ERR_INVALID_HEADER, "unknown message type %u", (unsigned)type);
    }
    if (r == WSYNC_OK && c.left)
        r = wsync__ctl_bad(err, WSYNC_ERR_TRAILING_BYTES, "%zu bytes after the message", c.left);
    if (r != WSYNC_OK) {
        wsync_allocator keep = out->alloc_;
        wsync_ctl_msg_free(out);
        out->alloc_ = keep;
        out->type = type;
    }
    return r;
}

WSYNC_DEF void wsync_ctl_auth_derive(const wsync_job_key *key, uint32_t role, uint32_t rank,
                                     const uint8_t nonce_rank[WSYNC_CTL_NONCE],
                                     const uint8_t nonce_ctl[WSYNC_CTL_NONCE], wsync_ctl_auth *out)
{
    static const wsync_job_key none = {{0}, 0}; /* no key: HMAC under the empty key */
    uint8_t t[8 + 2 * WSYNC_CTL_NONCE];
    const wsync_job_key *k = key ? key : &none;
    wsync__rdma_put32(t, role);
    wsync__rdma_put32(t + 4, rank);
    memcpy(t + 8, nonce_rank, WSYNC_CTL_NONCE);
    memcpy(t + 8 + WSYNC_CTL_NONCE, nonce_ctl, WSYNC_CTL_NONCE);
    wsync__rdma_key_mac(k, "wsync-ctl 4 controller proof", t, sizeof t, out->ctl_proof);
    wsync__rdma_key_mac(k, "wsync-ctl 4 rank proof", t, sizeof t, out->rank_proof);
    wsync__rdma_key_mac(k, "wsync-ctl 4 controller to rank", t, sizeof t, out->to_rank);
    wsync__rdma_key_mac(k, "wsync-ctl 4 rank to controller", t, sizeof t, out->to_ctl);
}

WSYNC_DEF void wsync_ctl_frame_mac(const uint8_t key[32], uint64_t seq, const uint8_t *frame, size_t len,
                                   uint8_t out[WSYNC_CTL_MAC])
{
    wsync_hmac_sha256_state s;
    uint8_t q[8];
    wsync__rdma_put64(q, seq);
    wsync_hmac_sha256_init(&s, key, 32);
    wsync_hmac_sha256_update(&s, q, 8);
    wsync_hmac_sha256_update(&s, frame, len);
    wsync_hmac_sha256_final(&s, out);
}

WSYNC_DEF wsync_result wsync_ctl_decode_frame(const uint8_t *buf, size_t len, const wsync_allocator *a,
                                              wsync_ctl_msg *out, wsync_error *err)
{
    uint32_t type = 0, pl = 0;
    wsync_result r;
    if (out) memset(out, 0, sizeof *out);
    if ((r = wsync_ctl_header(buf, len, &type, &pl, err)) != WSYNC_OK) return r;
    if (pl != len - WSYNC_CTL_HEADER)
        return wsync__ctl_bad(err, pl > len - WSYNC_CTL_HEADER ? WSYNC_ERR_TRUNCATED : WSYNC_ERR_TRAILING_BYTES,
                              "the header says %u payload bytes, %zu follow", (unsigned)pl, len - WSYNC_CTL_HEADER);
    return wsync_ctl_decode(type, buf + WSYNC_CTL_HEADER, pl, a, out, err);
}

/* ---------------------------------------------------------------------
   Controller and ranks (sockets, threads)
   --------------------------------------------------------------------- */

#if WSYNC__RDMA_OK

static const char *wsync__ctl_type_name(uint32_t t)
{
    static const char *const names[] = {"?",     "JOIN",  "ASSIGN", "GO",      "DONE",  "COMMIT",    "ACK",  "ABORT",
                                        "BYE",   "ERROR", "BARRIER", "RELEASE", "HELLO", "CHALLENGE", "PROOF", "OPEN"};
    return t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static void wsync__ctl_peer_name(int fd, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    snprintf(out, cap, "%s", "?");
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        snprintf(out, cap, "%.40s:%.10s", host, serv);
}

static int wsync__ctl_bit(const uint8_t *b, uint32_t i)
{
    return b[i / 8] >> (i % 8) & 1;
}

/* A transfer's source bytes: from src_offset to the end of its last row. */
static uint64_t wsync__ctl_extent(const wsync_ctl_transfer *x)
{
    uint64_t row_src = x->len / x->rows * (x->prep == WSYNC_CTL_PREP_FP8 ? 2 : 1);
    return (x->rows - 1) * x->src_stride + row_src; /* bounded at decode */
}

/* Shell sort of idx[0, n) by lt (few thousand entries, once per plan). */
static void wsync__ctl_sort(uint32_t *idx, uint32_t n, int (*lt)(const void *, uint32_t, uint32_t), const void *ctx)
{
    uint32_t gap, i, j, v;
    for (gap = n / 2; gap; gap = gap == 2 ? 1 : gap * 5 / 11)
        for (i = gap; i < n; i++) {
            v = idx[i];
            for (j = i; j >= gap && lt(ctx, v, idx[j - gap]); j -= gap) idx[j] = idx[j - gap];
            idx[j] = v;
        }
}

static int wsync__ctl_place_lt(const void *ctx, uint32_t a, uint32_t b)
{
    const wsync_ctl_tensor *t = (const wsync_ctl_tensor *)ctx;
    return t[a].region != t[b].region ? t[a].region < t[b].region : t[a].offset < t[b].offset;
}

/* The tensors a trainer's transfers read: for transfer j, the entries
   idx[off[j] .. off[j + 1]) of t whose bytes its source bytes overlap (in
   the same region). The controller and the trainer both compute it, from
   the same JOIN and ASSIGN: it is what a subset of tensors means in
   transfers. */
static wsync_result wsync__ctl_reads(const wsync_allocator *a, const wsync_ctl_tensor *t, uint32_t nt,
                                     const wsync_ctl_transfer *x, uint32_t nx, uint32_t **off_out,
                                     uint32_t **idx_out, wsync_error *err)
{
    uint32_t *order = NULL, *off = NULL, *idx = NULL, pass, j, k, n = 0;
    uint64_t *end = NULL;
    *off_out = *idx_out = NULL;
    order = (uint32_t *)wsync__rdma_alloc(a, ((size_t)nt + 1) * sizeof *order);
    end = (uint64_t *)wsync__rdma_alloc(a, ((size_t)nt + 1) * sizeof *end);
    off = (uint32_t *)wsync__rdma_alloc(a, ((size_t)nx + 1) * sizeof *off);
    if (!order || !end || !off) goto oom;
    for (k = 0; k < nt; k++) order[k] = k;
    wsync__ctl_sort(order, nt, wsync__ctl_place_lt, t);
    for (k = 0; k < nt; k++) {
        uint64_t bytes = 0;
        if (wsync_ctl_tensor_bytes(&t[order[k]], NULL, &bytes, NULL) != WSYNC_OK) bytes = 0;
        end[k] = t[order[k]].offset + bytes;
    }
    for (pass = 0; pass < 2; pass++) { /* count, then fill */
        for (j = 0, n = 0; j < nx; j++) {
            uint64_t lo = x[j].src_offset, hi = lo + wsync__ctl_extent(&x[j]);
            uint32_t l = 0, h = nt, reg = x[j].src_region;
            off[j] = n;
            while (l < h) { /* the first entry after (reg, lo): entries do not overlap, so ends ascend too */
                uint32_t mid = l + (h - l) / 2;
                const wsync_ctl_tensor *e = &t[order[mid]];
                if (e->region < reg || (e->region == reg && end[mid] <= lo)) l = mid + 1;
                else h = mid;
            }
            for (k = l; k < nt && t[order[k]].region == reg && t[order[k]].offset < hi; k++)
                if (end[k] > t[order[k]].offset && end[k] > lo) {
                    if (idx) idx[n] = order[k];
                    n++;
                }
        }
        off[nx] = n;
        if (pass == 0 && !(idx = (uint32_t *)wsync__rdma_alloc(a, ((size_t)n + 1) * sizeof *idx))) goto oom;
    }
    wsync__rdma_free(a, order);
    wsync__rdma_free(a, end);
    *off_out = off;
    *idx_out = idx;
    return WSYNC_OK;
oom:
    wsync__rdma_free(a, order);
    wsync__rdma_free(a, end);
    wsync__rdma_free(a, off);
    return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "the tensors of the transfers");
}

static int wsync__ctl_dst_lt(const void *ctx, uint32_t a, uint32_t b)
{
    const wsync_ctl_transfer *x = (const wsync_ctl_transfer *)ctx;
    return x[a].dst_offset < x[b].dst_offset;
}

/* A transfer that quantizes from the trainer's own gather inbox reads the
   tensor its rows came from: the reads of the trainer's own gather into
   that inbox spot (the gatherer is one of the tile's holders and writes
   its own rows there too, so it exists). Without this, a step of a subset would run the gathers of
   a named tensor and never the writes made of them. self: the trainer's
   rank code in targets (n_inference + rank). */
static wsync_result wsync__ctl_reads_inbox(const wsync_allocator *a, const wsync_ctl_tensor *t, uint32_t nt,
                                           const wsync_ctl_transfer *x, uint32_t nx, const wsync_ctl_target *tg,
                                           uint32_t self, uint32_t **off_io, uint32_t **idx_io, wsync_error *err)
{
    uint32_t ib, j, k, ns = 0, n = 0, *own = NULL, *off = NULL, *idx = NULL, *from = NULL, pass;
    for (ib = 0; ib < nt && strcmp(t[ib].name, WSYNC_CTL_INBOX) != 0; ib++) {
    }
    if (ib == nt) return WSYNC_OK;
    own = (uint32_t *)wsync__rdma_alloc(a, ((size_t)nx + 1) * sizeof *own);
    from = (uint32_t *)wsync__rdma_alloc(a, ((size_t)nx + 1) * sizeof *from);
    off = (uint32_t *)wsync__rdma_alloc(a, ((size_t)nx + 1) * sizeof *off);
    if (!own || !from || !off) goto oom;
    for (k = 0; k < nx; k++) /* the trainer's gathers into its own inbox */
        if (tg[x[k].target].rank == self && tg[x[k].target].region == t[ib].region) own[ns++] = k;
    wsync__ctl_sort(own, ns, wsync__ctl_dst_lt, x);
    for (j = 0; j < nx; j++) { /* whose reads each transfer takes */
        int inbox = 0;
        from[j] = j;
        for (k = (*off_io)[j]; k < (*off_io)[j + 1]; k++) inbox |= (*idx_io)[k] == ib;
        if (inbox) {
            uint32_t l = 0, h = ns;
            while (l < h) {
                uint32_t mid = l + (h - l) / 2;
                if (x[own[mid]].dst_offset < x[j].src_offset) l = mid + 1;
                else h = mid;
            }
            /* the first own write inside the spot: rows x src_stride bytes */
            if (l < ns && x[own[l]].dst_offset - x[j].src_offset < x[j].rows * x[j].src_stride) from[j] = own[l];
        }
    }
    for (pass = 0; pass < 2; pass++) {
        for (j = 0, n = 0; j < nx; j++) {
            off[j] = n;
            for (k = (*off_io)[from[j]]; k < (*off_io)[from[j] + 1]; k++, n++)
                if (idx) idx[n] = (*idx_io)[k];
        }
        off[nx] = n;
        if (pass == 0 && !(idx = (uint32_t *)wsync__rdma_alloc(a, ((size_t)n + 1) * sizeof *idx))) goto oom;
    }
    wsync__rdma_free(a, own);
    wsync__rdma_free(a, from);
    wsync__rdma_free(a, *off_io);
    wsync__rdma_free(a, *idx_io);
    *off_io = off;
    *idx_io = idx;
    return WSYNC_OK;
oom:
    wsync__rdma_free(a, own);
    wsync__rdma_free(a, from);
    wsync__rdma_free(a, off);
    return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "the tensors of the gathered transfers");
}

static void wsync__ctl_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* One connection's authentication after the handshake (see the protocol):
   HMAC-SHA256 states keyed with each direction's key, copied for every
   message, and each direction's sequence number. Without `on` (the
   handshake's own messages) frames carry no MAC. */
typedef struct wsync__ctl_sess {
    wsync_hmac_sha256_state tx, rx;
    uint64_t seq_tx, seq_rx;
    int on;
} wsync__ctl_sess;

/* The MAC of a frame: sequence number, then the frame. */
static void wsync__ctl_frame_mac(const wsync_hmac_sha256_state *key, uint64_t seq, const uint8_t *h, const uint8_t *pl,
                                 size_t n, uint8_t out[WSYNC_CTL_MAC])
{
    wsync_hmac_sha256_state s = *key;
    uint8_t q[8];
    wsync__rdma_put64(q, seq);
    wsync_hmac_sha256_update(&s, q, 8);
    wsync_hmac_sha256_update(&s, h, WSYNC_CTL_HEADER);
    if (n) wsync_hmac_sha256_update(&s, pl, n);
    wsync_hmac_sha256_final(&s, out);
}

/* The session after a handshake: controller 1 sends with to_rank. */
static void wsync__ctl_sess_start(wsync__ctl_sess *ss, const wsync_ctl_auth *au, int controller)
{
    wsync_hmac_sha256_init(&ss->tx, controller ? au->to_rank : au->to_ctl, 32);
    wsync_hmac_sha256_init(&ss->rx, controller ? au->to_ctl : au->to_rank, 32);
    ss->seq_tx = ss->seq_rx = 0;
    ss->on = 1;
}

static wsync_result wsync__ctl_send(int fd, wsync__ctl_sess *ss, const wsync_ctl_msg *m, const wsync_allocator *a,
                                    const char *to, wsync_error *err)
{
    uint8_t small[1024], *buf = small;
    size_t len = 0, mac = ss && ss->on ? WSYNC_CTL_MAC : 0;
    wsync_result r;
    wsync_ctl_encode(m, NULL, 0, &len, NULL);
    if (len == 0) return wsync_ctl_encode(m, NULL, 0, &len, err); /* the reason */
    if (len + mac > sizeof small && !(buf = (uint8_t *)wsync__rdma_alloc(a, len + mac)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s for %s: %zu bytes", wsync__ctl_type_name(m->type), to,
                                len);
    if ((r = wsync_ctl_encode(m, buf, len, &len, err)) == WSYNC_OK) {
        if (mac) wsync__ctl_frame_mac(&ss->tx, ss->seq_tx++, buf, buf + WSYNC_CTL_HEADER, len - WSYNC_CTL_HEADER,
                                      buf + len);
        if (wsync__rdma_send_all(fd, buf, len + mac, 0) != 0)
            r = wsync_error_set(err, WSYNC_ERR_IO, "sending %s to %s: %s", wsync__ctl_type_name(m->type), to,
                                 strerror(errno));
    }
    if (buf != small) wsync__rdma_free(a, buf);
    return r;
}

static wsync_result wsync__ctl_send_text(int fd, wsync__ctl_sess *ss, uint32_t type, uint64_t step,
                                         wsync_result status, const char *text, const char *to, wsync_error *err)
{
    wsync_ctl_msg m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.step = step;
    m.status = (uint32_t)status;
    if (text) snprintf(m.text, sizeof m.text, "%.255s", text);
    return wsync__ctl_send(fd, ss, &m, NULL, to, err);
}

/* One message within timeout_ms of waiting for each piece (idle: the wait
   for its first byte is unbounded). *closed = 1 when the peer closed the
   connection cleanly between messages. Timeout: WSYNC_ERR_LIMIT. */
/* A message; with a deadline (0: none) all of it by then. */
static wsync_result wsync__ctl_recv_by(int fd, wsync__ctl_sess *ss, int timeout_ms, int idle, int64_t deadline,
                                       const wsync_allocator *a, wsync_ctl_msg *m, const char *from, int *closed,
                                       wsync_error *err)
{
    uint8_t h[WSYNC_CTL_HEADER], *buf = NULL, mac[WSYNC_CTL_MAC], want[WSYNC_CTL_MAC];
    uint32_t type = 0, pl = 0;
    int rc;
    wsync_result r;
    *closed = 0;
    memset(m, 0, sizeof *m);
    rc = wsync__rdma_recv_by(fd, h, sizeof h, timeout_ms, idle, deadline);
    if (rc == 0) {
        *closed = 1;
        return wsync_error_set(err, WSYNC_ERR_IO, "%s closed the connection", from);
    }
    if (rc < 0 && errno == ETIMEDOUT)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "no message from %s within %d ms", from, timeout_ms);
    if (rc < 0) return wsync_error_set(err, WSYNC_ERR_IO, "reading from %s: %s", from, strerror(errno));
    if ((r = wsync_ctl_header(h, sizeof h, &type, &pl, err)) != WSYNC_OK) {
        char why[320];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        return wsync_error_set(err, r, "from %s: %s", from, why);
    }
    if (pl && !(buf = (uint8_t *)wsync__rdma_alloc(a, pl)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "a %u-byte message from %s", (unsigned)pl, from);
    if (pl && (rc = wsync__rdma_recv_by(fd, buf, pl, timeout_ms < 0 ? 10000 : timeout_ms, 0, deadline)) != 1) {
        wsync__rdma_free(a, buf);
        if (deadline && errno == ETIMEDOUT)
            return wsync_error_set(err, WSYNC_ERR_LIMIT, "%s: %s not complete within its deadline (too slow)", from,
                                    wsync__ctl_type_name(type));
        return wsync_error_set(err, WSYNC_ERR_IO, "%s: %s cut short", from, wsync__ctl_type_name(type));
    }
    if (ss && ss->on) { /* the frame's MAC, checked before anything in it is looked at */
        if (wsync__rdma_recv_by(fd, mac, sizeof mac, timeout_ms < 0 ? 10000 : timeout_ms, 0, deadline) != 1) {
            wsync__rdma_free(a, buf);
            return wsync_error_set(err, WSYNC_ERR_IO, "%s: %s cut short (its MAC)", from, wsync__ctl_type_name(type));
        }
        wsync__ctl_frame_mac(&ss->rx, ss->seq_rx++, h, buf, pl, want);
        if (!wsync_ct_equal(mac, want, sizeof mac)) {
            wsync__rdma_free(a, buf);
            return wsync_error_set(err, WSYNC_ERR_AUTH,
                                    "from %s: a %s whose MAC does not match (forged, replayed or reordered): refused",
                                    from, wsync__ctl_type_name(type));
        }
    }
    r = wsync_ctl_decode(type, buf, pl, a, m, err);
    wsync__rdma_free(a, buf);
    if (r != WSYNC_OK) {
        char why[320];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        return wsync_error_set(err, r, "from %s: %s", from, why);
    }
    return WSYNC_OK;
}

static wsync_result wsync__ctl_recv(int fd, wsync__ctl_sess *ss, int timeout_ms, int idle, const wsync_allocator *a,
                                    wsync_ctl_msg *m, const char *from, int *closed, wsync_error *err)
{
    return wsync__ctl_recv_by(fd, ss, timeout_ms, idle, 0, a, m, from, closed, err);
}

/* ---- the controller >>controller ---- */

typedef struct wsync__ctl_member {
    int fd, gone;
    wsync__ctl_sess sess;      /* the connection's MACs */
    char name[48];             /* "trainer rank 3" */
    char peer[64];
    wsync_ctl_msg join;
    wsync_ctl_target *targets; /* trainers: the plan */
    uint32_t n_targets, cap_targets;
    wsync_ctl_transfer *xfers;
    uint32_t n_xfers, cap_xfers;
    uint64_t bytes;
    uint32_t *reads_off, *reads; /* trainers: the tensors each transfer reads (wsync__ctl_reads) */
    uint32_t *name_id;         /* trainers: each tensor's name among all trainers' (c->named) */
    wsync_ctl_msg done;        /* trainers: the step's DONE, for the check */
    uint32_t *senders, n_senders; /* inference: the trainers whose plan writes to it (OPEN) */
    int has_stg;               /* inference: a staging region (WSYNC_CTL_STAGING) */
    uint32_t stg_region;
} wsync__ctl_member;

struct wsync_controller {
    wsync_allocator a;
    int lfd;
    unsigned port, nt, ni, join_ms, step_ms;
    wsync__ctl_member *m;      /* nt trainers, then ni inference ranks */
    int accepted, in_step;
    uint64_t last_step, go_step;
    wsync_controller_plan plan;
    double t_go, t_done, t_ack;
    uint32_t n_groups;         /* mesh groups every trainer passes */
    uint32_t schedule;         /* wsync_ctl_schedule asked for */
    wsync_plan_options popt;   /* the planner's options */
    double pace;               /* pacing: the planned starts' rate in bytes/s (0: none) */
    char no_greedy[200];       /* why the greedy mapping cannot serve (fp8 tiles across shards) */
    int gphase;                /* the plan gathers between trainers: group g's gathers run as
                                  group 2g, its writes as 2g + 1 */
    wsync_plan *pplan;         /* the plan executed (schedule PLAN) */
    uint32_t n_names;          /* distinct tensor names over the trainers */
    uint32_t *named;           /* per name, in a step's check: 1 + the first trainer naming it, or 0 */
    uint64_t step_tasks, step_bytes; /* the last finished step's transfers as checked */
    wsync_job_key key;         /* the job key (len 0: none) */
    void (*log)(void *user, const char *line);
    void *log_user;
    unsigned refused;          /* connections refused */
    char last_refused[480];
};

/* A refused connection: counted, logged with the peer's address. */
static void wsync__ctl_refuse(wsync_controller *c, const char *peer, const char *why)
{
    c->refused++;
    snprintf(c->last_refused, sizeof c->last_refused, "controller: refused the connection from %.64s: %.300s", peer,
             why);
    wsync_error_clean(c->last_refused);
    if (c->log) c->log(c->log_user, c->last_refused);
    else fprintf(stderr, "wsync %s\n", c->last_refused);
}

WSYNC_DEF unsigned wsync_controller_refused(const wsync_controller *c, char *last, size_t cap)
{
    if (last && cap) snprintf(last, cap, "%s", c ? c->last_refused : "");
    return c ? c->refused : 0;
}

/* 1 when addr is a loopback address (127/8, ::1, ::ffff:127.x). */
static int wsync__ctl_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

static double wsync__ctl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

WSYNC_DEF void wsync_controller_step_times(const wsync_controller *c, double *transfer_s, double *commit_s)
{
    if (transfer_s) *transfer_s = c ? c->t_done - c->t_go : 0;
    if (commit_s) *commit_s = c ? c->t_ack - c->t_done : 0;
}

WSYNC_DEF void wsync_controller_step_tasks(const wsync_controller *c, uint64_t *tasks, uint64_t *bytes)
{
    if (tasks) *tasks = c ? c->step_tasks : 0;
    if (bytes) *bytes = c ? c->step_bytes : 0;
}

WSYNC_DEF wsync_result wsync_controller_open(const wsync_controller_options *opt, wsync_controller **out,
                                             wsync_error *err)
{
    wsync_controller *c;
    wsync_allocator a;
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    const char *host;
    unsigned i;
    int gai, e = 0, one = 1;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (out) *out = NULL;
    if (!opt || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "controller: options and out");
    if (opt->n_trainers == 0 || opt->n_inference == 0 || opt->n_trainers > WSYNC_CTL_MAX_RANKS ||
        opt->n_inference > WSYNC_CTL_MAX_RANKS)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "controller: %u trainers and %u inference ranks",
                                opt->n_trainers, opt->n_inference);
    a = opt->allocator;
    c = (wsync_controller *)wsync__rdma_alloc(&a, sizeof *c);
    if (!c) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "controller");
    c->a = a;
    c->lfd = -1;
    c->nt = opt->n_trainers;
    c->ni = opt->n_inference;
    c->join_ms = opt->join_timeout_ms ? opt->join_timeout_ms : 30000;
    c->step_ms = opt->step_timeout_ms ? opt->step_timeout_ms : 30000;
    c->schedule = opt->schedule;
    if (opt->plan) c->popt = *opt->plan;
    c->pace = opt->pace_gbps > 0 && opt->pace_gbps < 1e9 ? opt->pace_gbps * 1e9 / 8 : 0;
    c->popt.allocator = a;
    c->popt.nics_per_rank = 1;
    c->log = opt->log;
    c->log_user = opt->log_user;
    if (wsync_job_key_resolve(opt->job_key, opt->job_key_len, &c->key, err) != WSYNC_OK) {
        char why[300];
        snprintf(why, sizeof why, "%.250s", err ? err->message : "");
        wsync__rdma_free(&a, c);
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "controller: %s", why);
    }
    if (c->schedule > WSYNC_CTL_SCHEDULE_GREEDY) {
        wsync__rdma_free(&a, c);
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "controller: schedule %u (0 auto, 1 plan, 2 greedy)",
                                (unsigned)opt->schedule);
    }
    c->m = (wsync__ctl_member *)wsync__rdma_alloc(&a, (size_t)(c->nt + c->ni) * sizeof *c->m);
    if (!c->m) {
        wsync__rdma_free(&a, c);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "controller members");
    }
    for (i = 0; i < c->nt + c->ni; i++) {
        c->m[i].fd = -1;
        snprintf(c->m[i].name, sizeof c->m[i].name, "%s rank %u", i < c->nt ? "trainer" : "inference",
                 i < c->nt ? i : i - c->nt);
    }
    host = opt->bind_host ? opt->bind_host : "127.0.0.1";
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(ps, sizeof ps, "%u", opt->port);
    if ((gai = getaddrinfo(host, ps, &hints, &res)) != 0) {
        wsync_controller_close(c);
        return wsync_error_set(err, WSYNC_ERR_IO, "controller: cannot resolve '%s': %s", host, gai_strerror(gai));
    }
    for (ai = res; ai; ai = ai->ai_next) {
        c->lfd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (c->lfd < 0) {
            e = errno;
            continue;
        }
        if (!c->key.len && !opt->insecure && !wsync__ctl_loopback(ai->ai_addr)) {
            close(c->lfd);
            c->lfd = -1;
            freeaddrinfo(res);
            wsync_controller_close(c);
            return wsync_error_set(err, WSYNC_ERR_AUTH,
                                    "controller: no job key to listen on %s (not a loopback address): anyone who "
                                    "reaches the port could join; set WSYNC_JOB_KEY or WSYNC_JOB_KEY_FILE (or the "
                                    "job_key option), or pass insecure (--insecure) on a trusted network",
                                    host);
        }
        setsockopt(c->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        /* a deep accept queue: a burst of idle or hostile connections (a few
           hundred) plus every real rank must fit, else a rank's SYN is dropped
           and its join waits on the kernel's retry (1 s, then more); Linux
           caps the number at net.core.somaxconn (4096 by default since 5.4) */
        if (bind(c->lfd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(c->lfd, 4096) == 0) break;
        e = errno;
        close(c->lfd);
        c->lfd = -1;
    }
    freeaddrinfo(res);
    if (c->lfd < 0) {
        wsync_controller_close(c);
        return wsync_error_set(err, WSYNC_ERR_IO, "controller: cannot listen on %s port %u: %s", host, opt->port,
                                strerror(e));
    }
    {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(c->lfd, (struct sockaddr *)&ss, &sl) == 0)
            c->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
    }
    *out = c;
    return WSYNC_OK;
}

WSYNC_DEF unsigned wsync_controller_port(const wsync_controller *c)
{
    return c ? c->port : 0;
}

WSYNC_DEF void wsync_controller_plan_get(const wsync_controller *c, wsync_controller_plan *out)
{
    if (!out) return;
    if (c) *out = c->plan;
    else memset(out, 0, sizeof *out);
}

WSYNC_DEF const struct wsync_plan *wsync_controller_plan_ref(const wsync_controller *c)
{
    return c ? c->pplan : NULL;
}

/* The names of the ranks that have not joined, for a timeout's message. */
static void wsync__ctl_missing(const wsync_controller *c, char *out, size_t cap)
{
    unsigned i, n = 0;
    size_t at = 0;
    out[0] = 0;
    for (i = 0; i < c->nt + c->ni && at + 1 < cap; i++) {
        if (c->m[i].fd >= 0) continue;
        if (n++ == 8) {
            snprintf(out + at, cap - at, ", ...");
            break;
        }
        at += (size_t)snprintf(out + at, cap - at, "%s%s", n > 1 ? ", " : "", c->m[i].name);
        if (at >= cap) break;
    }
}

/* An inference rank's staging entry (WSYNC_CTL_STAGING): no tensor, so
   taken out of the JOIN's entries (the plan never sees it) into the
   member; it must cover one whole region that holds no tensor. A trainer
   may not name one. 0, or -1 with why. */
static int wsync__ctl_take_staging(wsync__ctl_member *m, wsync_ctl_msg *j, char *why, size_t cap)
{
    uint32_t e, k, at = UINT32_MAX;
    for (e = 0; e < j->n_tensors; e++) {
        if (strcmp(j->tensors[e].name, WSYNC_CTL_STAGING) != 0) continue;
        if (j->role != WSYNC_CTL_INFERENCE || at != UINT32_MAX) {
            snprintf(why, cap, "entry %u: %s %s", (unsigned)e,
                     j->role != WSYNC_CTL_INFERENCE ? "a trainer names" : "a second", WSYNC_CTL_STAGING);
            return -1;
        }
        at = e;
    }
    if (at == UINT32_MAX) return 0;
    {
        const wsync_ctl_tensor *t = &j->tensors[at];
        if (t->dtype != WSYNC_DTYPE_U8 || t->ndim != 1 || t->row_begin != 0 || t->offset != 0 ||
            t->row_count != t->shape[0] || t->region >= j->n_regions || t->row_count != j->regions[t->region].len) {
            snprintf(why, cap, "entry %u: %s must be U8, one dimension, covering its whole region", (unsigned)at,
                     WSYNC_CTL_STAGING);
            return -1;
        }
        for (k = 0; k < j->n_tensors; k++)
            if (k != at && j->tensors[k].region == t->region) {
                snprintf(why, cap, "entry %u ('%.100s') lies in region %u, the staging region (%s)", (unsigned)k,
                         j->tensors[k].name, (unsigned)t->region, WSYNC_CTL_STAGING);
                return -1;
            }
        m->has_stg = 1;
        m->stg_region = t->region;
    }
    memmove(&j->tensors[at], &j->tensors[at + 1], (size_t)(j->n_tensors - at - 1) * sizeof *j->tensors);
    j->n_tensors--;
    return 0;
}

static int wsync__ctl_grow(const wsync_allocator *a, void **arr, uint32_t *cap, uint32_t n, size_t elem);

/* Trainers: after the plan, a target for the staging region of every
   inference rank they write to (WSYNC_CTL_TARGET_STAGING), where it has one. */
static wsync_result wsync__ctl_stg_targets(wsync_controller *c, wsync_error *err)
{
    unsigned t, i;
    for (t = 0; t < c->nt; t++) {
        wsync__ctl_member *h = &c->m[t];
        for (i = 0; i < c->ni; i++) {
            const wsync__ctl_member *in = &c->m[c->nt + i];
            uint32_t g, n = h->n_targets;
            if (!in->has_stg) continue;
            for (g = 0; g < n && h->targets[g].rank != i; g++) {
            }
            if (g == n) continue;
            if (!wsync__ctl_grow(&c->a, (void **)&h->targets, &h->cap_targets, h->n_targets, sizeof *h->targets))
                return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: staging targets of %s", h->name);
            h->targets[n].rank = i;
            h->targets[n].region = in->stg_region | WSYNC_CTL_TARGET_STAGING;
            h->targets[n].desc = in->join.regions[in->stg_region];
            h->n_targets++;
        }
    }
    return WSYNC_OK;
}

/* Takes one authenticated connection's JOIN into its slot, or answers
   ERROR and drops it. */
#define WSYNC__CTL_JOIN_TOTAL_MS 2000 /* a whole JOIN, from its first bytes (16 MiB at 8 MB/s) */
#define WSYNC__CTL_AUTH_MS 1000       /* a whole handshake, from the connection's accept */

static void wsync__ctl_take_join(wsync_controller *c, int fd, wsync__ctl_sess *ss, uint32_t role, uint32_t rank,
                                 const char *peer, int timeout_ms)
{
    wsync_ctl_msg msg;
    wsync_error e;
    char why[320];
    int closed = 0;
    unsigned slot, limit;
    wsync__rdma_set_timeouts(fd, c->step_ms);
    /* a JOIN comes whole within WSYNC__CTL_JOIN_TOTAL_MS of its first bytes:
       one trickled a byte at a time holds the accept loop no longer */
    if (wsync__ctl_recv_by(fd, ss, timeout_ms, 0, wsync__rdma_now_ms() + WSYNC__CTL_JOIN_TOTAL_MS, &c->a, &msg, peer,
                           &closed, &e) != WSYNC_OK) {
        if (!closed) wsync__ctl_send_text(fd, ss, WSYNC_CTL_ERROR, 0, e.code, e.message, peer, NULL);
        wsync__ctl_refuse(c, peer, e.message);
        close(fd);
        return;
    }
    if (msg.type != WSYNC_CTL_JOIN) {
        snprintf(why, sizeof why, "expected JOIN, got %s", wsync__ctl_type_name(msg.type));
        goto refuse;
    }
    if (msg.role != role || msg.rank != rank) {
        snprintf(why, sizeof why, "JOIN as %s rank %u after a HELLO as %s rank %u",
                 msg.role == WSYNC_CTL_TRAINER ? "trainer" : "inference", (unsigned)msg.rank,
                 role == WSYNC_CTL_TRAINER ? "trainer" : "inference", (unsigned)rank);
        goto refuse;
    }
    limit = msg.role == WSYNC_CTL_TRAINER ? c->nt : c->ni;
    if (msg.rank >= limit) {
        snprintf(why, sizeof why, "%s rank %u: this controller waits for %u %s ranks (0 to %u)",
                 msg.role == WSYNC_CTL_TRAINER ? "trainer" : "inference", (unsigned)msg.rank, limit,
                 msg.role == WSYNC_CTL_TRAINER ? "trainer" : "inference", limit - 1);
        goto refuse;
    }
    slot = msg.role == WSYNC_CTL_TRAINER ? msg.rank : c->nt + msg.rank;
    if (c->m[slot].fd >= 0) {
        snprintf(why, sizeof why, "%s already joined (from %s)", c->m[slot].name, c->m[slot].peer);
        goto refuse;
    }
    if (wsync__ctl_take_staging(&c->m[slot], &msg, why, sizeof why) != 0) goto refuse;
    c->m[slot].fd = fd;
    c->m[slot].sess = *ss;
    c->m[slot].join = msg;
    snprintf(c->m[slot].peer, sizeof c->m[slot].peer, "%s", peer);
    return;
refuse:
    wsync__ctl_send_text(fd, ss, WSYNC_CTL_ERROR, 0, WSYNC_ERR_INVALID_ARGUMENT, why, peer, NULL);
    wsync__ctl_refuse(c, peer, why);
    wsync_ctl_msg_free(&msg);
    close(fd);
}

/* A connection in its handshake: read without blocking as its bytes come,
   from the accept loop's poll, within WSYNC__CTL_AUTH_MS of its accept.
   HELLO, then CHALLENGE sent, then PROOF; the JOIN after it is read whole
   (wsync__ctl_take_join). */
typedef struct wsync__ctl_pend {
    int fd;
    int64_t until;
    uint64_t order;            /* accept order */
    uint64_t host;             /* a hash of the peer's address, its port left out */
    uint32_t got, phase;       /* bytes of the message read; 0: HELLO, 1: PROOF */
    uint8_t buf[WSYNC_CTL_HEADER + 8 + WSYNC_CTL_NONCE];
    uint32_t role, rank;
    wsync_ctl_auth auth;
    char peer[64];
} wsync__ctl_pend;

static const char *wsync__ctl_role_name(uint32_t role)
{
    return role == WSYNC_CTL_TRAINER ? "trainer" : "inference";
}

/* Reads what p's connection sent; 1 while its handshake goes on, 0 once
   it was refused (closed) or authenticated (handed to take_join). */
static int wsync__ctl_pend_read(wsync_controller *c, wsync__ctl_pend *p, int join_ms)
{
    uint32_t want = WSYNC_CTL_HEADER + (p->phase == 0 ? 8 + WSYNC_CTL_NONCE : WSYNC_CTL_MAC), type = 0, pl = 0;
    ssize_t k = recv(p->fd, p->buf + p->got, want - p->got, MSG_DONTWAIT);
    wsync_ctl_msg m;
    wsync_error e;
    char why[320];
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 1;
    if (k <= 0) {
        if (p->phase == 1)
            snprintf(why, sizeof why, "%s rank %u closed the connection in the handshake (its job key is not "
                                      "this controller's, or it has none)",
                     wsync__ctl_role_name(p->role), (unsigned)p->rank);
        else
            snprintf(why, sizeof why, "closed the connection before its HELLO (%u bytes of it)", (unsigned)p->got);
        goto refuse;
    }
    p->got += (uint32_t)k;
    if (p->got >= WSYNC_CTL_HEADER) {
        if (wsync_ctl_header(p->buf, WSYNC_CTL_HEADER, &type, &pl, &e) != WSYNC_OK) {
            snprintf(why, sizeof why, "not a handshake: %.250s", e.message);
            goto refuse;
        }
        if (type != (p->phase == 0 ? WSYNC_CTL_HELLO : WSYNC_CTL_PROOF) || pl != want - WSYNC_CTL_HEADER) {
            snprintf(why, sizeof why, "expected %s, got %s of %u bytes (a rank must prove the job key first)",
                     p->phase == 0 ? "HELLO" : "PROOF", wsync__ctl_type_name(type), (unsigned)pl);
            goto refuse;
        }
    }
    if (p->got < want) return 1;
    if (wsync_ctl_decode(type, p->buf + WSYNC_CTL_HEADER, pl, NULL, &m, &e) != WSYNC_OK) {
        snprintf(why, sizeof why, "%s: %.250s", wsync__ctl_type_name(type), e.message);
        goto refuse;
    }
    if (p->phase == 0) {
        wsync_ctl_msg ch;
        uint8_t out[WSYNC_CTL_HEADER + WSYNC_CTL_NONCE + WSYNC_CTL_MAC];
        size_t n = 0;
        memset(&ch, 0, sizeof ch);
        ch.type = WSYNC_CTL_CHALLENGE;
        p->role = m.role;
        p->rank = m.rank;
        if (wsync_random_bytes(ch.nonce, sizeof ch.nonce) != WSYNC_OK) {
            snprintf(why, sizeof why, "%s", "no random source for the challenge's nonce");
            goto refuse;
        }
        wsync_ctl_auth_derive(&c->key, m.role, m.rank, m.nonce, ch.nonce, &p->auth);
        memcpy(ch.mac, p->auth.ctl_proof, WSYNC_CTL_MAC);
        if (wsync_ctl_encode(&ch, out, sizeof out, &n, &e) != WSYNC_OK ||
            send(p->fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n) {
            snprintf(why, sizeof why, "%s", "sending the challenge failed");
            goto refuse;
        }
        p->phase = 1;
        p->got = 0;
        return 1;
    }
    if (!wsync_ct_equal(m.mac, p->auth.rank_proof, WSYNC_CTL_MAC)) {
        snprintf(why, sizeof why, "%s rank %u did not prove the job key (it has another one, or none): refused",
                 wsync__ctl_role_name(p->role), (unsigned)p->rank);
        goto refuse;
    }
    {
        wsync__ctl_sess ss;
        wsync__ctl_sess_start(&ss, &p->auth, 1);
        memset(&p->auth, 0, sizeof p->auth);
        wsync__ctl_take_join(c, p->fd, &ss, p->role, p->rank, p->peer, join_ms);
        memset(&ss, 0, sizeof ss);
    }
    return 0;
refuse:
    wsync__ctl_refuse(c, p->peer, why);
    close(p->fd);
    return 0;
}

typedef struct wsync__ctl_ref {
    const char *name;
    uint32_t member, tensor;
} wsync__ctl_ref;

static int wsync__ctl_ref_cmp(const void *x, const void *y)
{
    const wsync__ctl_ref *a = (const wsync__ctl_ref *)x, *b = (const wsync__ctl_ref *)y;
    int k = strcmp(a->name, b->name);
    if (k) return k;
    if (a->member != b->member) return a->member < b->member ? -1 : 1;
    return a->tensor < b->tensor ? -1 : a->tensor > b->tensor;
}

static int wsync__ctl_grow(const wsync_allocator *a, void **arr, uint32_t *cap, uint32_t n, size_t elem)
{
    uint32_t nc;
    void *p;
    if (n < *cap) return 1;
    if (*cap >= WSYNC__CTL_MAX_TRANSFERS) return 0;
    nc = *cap ? *cap * 2 : 64;
    if (!(p = wsync__rdma_alloc(a, (size_t)nc * elem))) return 0;
    if (*arr) memcpy(p, *arr, (size_t)n * elem);
    wsync__rdma_free(a, *arr);
    *arr = p;
    *cap = nc;
    return 1;
}

/* Elements per row of an entry's full tensor (the dims after the first). */
static uint64_t wsync__ctl_cols(const wsync_ctl_tensor *t)
{
    uint64_t cols = 1;
    uint32_t i;
    for (i = 1; i < t->ndim; i++) cols *= t->shape[i]; /* checked at decode */
    return cols;
}

/* Adds rows [r0, r1) of inference entry `it` (member mi), from trainer
   entry `tt` (member h), to h's plan: contiguous when the entry wants
   every column in the trainer's dtype (merged with the previous write when
   both sides continue it), else rows with a stride (a column slice), or
   all its rows at once with fp8 preparation. */
static wsync_result wsync__ctl_add(wsync_controller *c, wsync__ctl_member *h, const wsync_ctl_tensor *tt, uint32_t mi,
                                   const wsync_ctl_tensor *it, uint64_t r0, uint64_t r1, int merge, wsync_error *err)
{
    const wsync__ctl_member *in = &c->m[mi];
    uint32_t g, irank = mi - c->nt;
    uint64_t esz = wsync_dtype_bits((wsync_dtype)tt->dtype) / 8, cols = wsync__ctl_cols(tt), cc, dst_row;
    int fp8 = wsync__ctl_fp8(it);
    wsync_ctl_transfer x, *last;
    if (r1 <= r0) return WSYNC_OK;
    for (g = 0; g < h->n_targets; g++)
        if (h->targets[g].rank == irank && h->targets[g].region == it->region) break;
    if (g == h->n_targets) {
        if (!wsync__ctl_grow(&c->a, (void **)&h->targets, &h->cap_targets, h->n_targets, sizeof *h->targets))
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: targets of %s", h->name);
        h->targets[g].rank = irank;
        h->targets[g].region = it->region;
        h->targets[g].desc = in->join.regions[it->region];
        h->n_targets++;
    }
    cc = it->col_count ? it->col_count : cols;
    dst_row = cc * (fp8 ? 1 : esz);
    memset(&x, 0, sizeof x);
    x.src_region = tt->region;
    x.group = tt->group;
    x.target = g;
    x.src_offset = tt->offset + (r0 - tt->row_begin) * cols * esz + it->col_begin * esz;
    x.dst_offset = it->offset + (r0 - it->row_begin) * dst_row;
    x.rows = r1 - r0;
    x.src_stride = cols * esz;
    x.len = x.rows * dst_row;
    if (fp8) {
        x.prep = WSYNC_CTL_PREP_FP8;
        x.block = it->block;
        /* rows from a tile row's start (whole entries, or the planner's
           block-aligned cuts): the scales of its tile rows */
        x.scale_offset = it->scale_offset + (it->block ? (r0 - it->row_begin) / it->block *
                                                             wsync_quantize_scale_count(1, cc, it->block) * 4
                                                       : 0);
    } else if (cc == cols) {
        x.rows = 1;
        x.src_stride = 0;
    }
    if (x.len == 0) return WSYNC_OK;
    last = h->n_xfers ? &h->xfers[h->n_xfers - 1] : NULL;
    if (merge && last && x.rows == 1 && last->rows == 1 && !x.prep && !last->prep && last->target == x.target &&
        last->group == x.group &&
        last->src_region == x.src_region && last->src_offset + last->len == x.src_offset &&
        last->dst_offset + last->len == x.dst_offset) {
        last->len += x.len;
    } else {
        if (!wsync__ctl_grow(&c->a, (void **)&h->xfers, &h->cap_xfers, h->n_xfers, sizeof *h->xfers))
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: transfers of %s", h->name);
        h->xfers[h->n_xfers++] = x;
    }
    h->bytes += x.len + (fp8 ? 4 * wsync_quantize_scale_count(x.rows, cc, x.block) : 0);
    return WSYNC_OK;
}

static int wsync__ctl_same_shape(const wsync_ctl_tensor *a, const wsync_ctl_tensor *b)
{
    uint32_t k;
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k]) return 0;
    return 1;
}

/* An fp8 entry comes from one trainer holding all its rows (a tile's scale
   needs every element of the tile): the least loaded of those. */
static wsync_result wsync__ctl_cover_whole(wsync_controller *c, uint32_t mi, const wsync_ctl_tensor *it,
                                           const wsync__ctl_ref *refs, size_t lo, size_t hi, wsync_error *err)
{
    size_t k, best = hi;
    uint64_t end = it->row_begin + it->row_count;
    for (k = lo; k < hi; k++) {
        const wsync_ctl_tensor *tt = &c->m[refs[k].member].join.tensors[refs[k].tensor];
        if (tt->row_begin > it->row_begin || tt->row_begin + tt->row_count < end) continue;
        if (best == hi || c->m[refs[k].member].bytes < c->m[refs[best].member].bytes) best = k;
    }
    if (best == hi && c->schedule != WSYNC_CTL_SCHEDULE_GREEDY) {
        /* the planner's schedule gathers tiles between trainers (through
           their inboxes); this mapping cannot: only check the rows are held */
        uint64_t cur = it->row_begin;
        while (cur < end) {
            uint64_t to = cur;
            for (k = lo; k < hi; k++) {
                const wsync_ctl_tensor *tt = &c->m[refs[k].member].join.tensors[refs[k].tensor];
                if (tt->row_begin <= cur && tt->row_begin + tt->row_count > to) to = tt->row_begin + tt->row_count;
            }
            if (to == cur)
                return wsync_error_set(err, WSYNC_ERR_NOT_FOUND,
                                        "plan: tensor '%s': %s needs row %llu, which no trainer holds", it->name,
                                        c->m[mi].name, (unsigned long long)cur);
            cur = to;
        }
        if (!c->no_greedy[0])
            snprintf(c->no_greedy, sizeof c->no_greedy,
                     "tensor '%.60s': %s wants rows %llu to %llu in fp8, and no trainer holds all of them", it->name,
                     c->m[mi].name, (unsigned long long)it->row_begin, (unsigned long long)end - 1);
        return WSYNC_OK;
    }
    if (best == hi)
        return wsync_error_set(err, WSYNC_ERR_NOT_FOUND,
                                "plan: tensor '%s': %s wants rows %llu to %llu in fp8, and no trainer holds all of them "
                                "(a tile's scale needs every element of the tile at one sender)",
                                it->name, c->m[mi].name, (unsigned long long)it->row_begin, (unsigned long long)end - 1);
    return wsync__ctl_add(c, &c->m[refs[best].member], &c->m[refs[best].member].join.tensors[refs[best].tensor], mi,
                          it, it->row_begin, end, 1, err);
}

/* Maps one inference entry's rows onto the trainers holding them
   (refs[lo, hi): the trainer entries of that name). */
static wsync_result wsync__ctl_cover(wsync_controller *c, uint32_t mi, const wsync_ctl_tensor *it,
                                     const wsync__ctl_ref *refs, size_t lo, size_t hi, wsync_error *err)
{
    uint64_t cur, end;
    size_t k;
    wsync_result r;
    for (k = lo; k < hi; k++) {
        const wsync_ctl_tensor *tt = &c->m[refs[k].member].join.tensors[refs[k].tensor];
        if (!wsync__ctl_same_shape(tt, it))
            return wsync_error_set(err, WSYNC_ERR_SIZE_MISMATCH,
                                    "plan: tensor '%s': %s holds %s of %u dimensions, %s wants %s of %u", it->name,
                                    c->m[refs[k].member].name, wsync_dtype_name((wsync_dtype)tt->dtype),
                                    (unsigned)tt->ndim, c->m[mi].name, wsync_dtype_name((wsync_dtype)it->dtype),
                                    (unsigned)it->ndim);
        if ((tt->col_count && tt->col_count != wsync__ctl_cols(tt)) || (tt->to_dtype && tt->to_dtype != tt->dtype))
            return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                    "plan: tensor '%s': %s holds a column slice or another dtype (trainers hold row "
                                    "shards of every column, as stored)", it->name, c->m[refs[k].member].name);
    }
    if (wsync__ctl_fp8(it)) return wsync__ctl_cover_whole(c, mi, it, refs, lo, hi, err);
    cur = it->row_begin;
    end = it->row_begin + it->row_count;
    while (cur < end) {
        uint64_t next = end;
        size_t best = hi;
        for (k = lo; k < hi; k++) {
            const wsync_ctl_tensor *tt = &c->m[refs[k].member].join.tensors[refs[k].tensor];
            uint64_t b = tt->row_begin, e = tt->row_begin + tt->row_count;
            if (b > cur) {
                if (b < next) next = b;
                continue;
            }
            if (e <= cur) continue;
            if (e < next) next = e;
            if (best == hi || c->m[refs[k].member].bytes < c->m[refs[best].member].bytes) best = k;
        }
        if (best == hi)
            return wsync_error_set(err, WSYNC_ERR_NOT_FOUND, "plan: tensor '%s': rows %llu to %llu (of %s) are held by no trainer",
                                    it->name, (unsigned long long)cur, (unsigned long long)next - 1, c->m[mi].name);
        r = wsync__ctl_add(c, &c->m[refs[best].member], &c->m[refs[best].member].join.tensors[refs[best].tensor], mi,
                           it, cur, next, 1, err);
        if (r != WSYNC_OK) return r;
        cur = next;
    }
    return WSYNC_OK;
}

static wsync_result wsync__ctl_plan(wsync_controller *c, wsync_error *err)
{
    size_t n = 0, k, i;
    uint32_t mi, t;
    wsync__ctl_ref *refs, key;
    wsync_result r = WSYNC_OK;
    for (mi = 0; mi < c->nt; mi++) n += c->m[mi].join.n_tensors;
    refs = (wsync__ctl_ref *)wsync__rdma_alloc(&c->a, (n ? n : 1) * sizeof *refs);
    if (!refs) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: index");
    for (k = 0, mi = 0; mi < c->nt; mi++)
        for (t = 0; t < c->m[mi].join.n_tensors; t++, k++) {
            refs[k].name = c->m[mi].join.tensors[t].name;
            refs[k].member = mi;
            refs[k].tensor = t;
        }
    qsort(refs, n, sizeof *refs, wsync__ctl_ref_cmp);
    for (k = 1; k < n; k++)
        if (refs[k].member == refs[k - 1].member && strcmp(refs[k].name, refs[k - 1].name) == 0) {
            r = wsync_error_set(err, WSYNC_ERR_DUPLICATE_KEY, "plan: %s holds tensor '%s' twice",
                                 c->m[refs[k].member].name, refs[k].name);
            goto out;
        }
    for (mi = c->nt; mi < c->nt + c->ni && r == WSYNC_OK; mi++) {
        const wsync_ctl_msg *j = &c->m[mi].join;
        for (t = 0; t < j->n_tensors && r == WSYNC_OK; t++) {
            size_t lo = 0, hi = n, m;
            key.name = j->tensors[t].name;
            key.member = 0;
            key.tensor = 0;
            while (lo < hi) { /* the first entry of that name */
                m = lo + (hi - lo) / 2;
                if (strcmp(refs[m].name, key.name) < 0) lo = m + 1;
                else hi = m;
            }
            for (hi = lo; hi < n && strcmp(refs[hi].name, key.name) == 0; hi++) {
            }
            for (i = 0; i < t; i++) /* a name twice in one inference rank */
                if (strcmp(j->tensors[i].name, key.name) == 0) break;
            if (i < t)
                r = wsync_error_set(err, WSYNC_ERR_DUPLICATE_KEY, "plan: %s holds tensor '%s' twice", c->m[mi].name,
                                     key.name);
            else if (lo == hi)
                r = wsync_error_set(err, WSYNC_ERR_NOT_FOUND, "plan: %s needs tensor '%s', which no trainer holds",
                                     c->m[mi].name, key.name);
            else
                r = wsync__ctl_cover(c, mi, &j->tensors[t], refs, lo, hi, err);
        }
    }
out:
    wsync__rdma_free(&c->a, refs);
    return r;
}

/* The target index of (rank code, region) in h's targets, added with its
   descriptor when new (rank code: an inference rank, or n_inference + t
   for trainer t's gather inbox). */
static wsync_result wsync__ctl_target(wsync_controller *c, wsync__ctl_member *h, uint32_t rank, uint32_t region,
                                      const wsync_fabric_desc *desc, uint32_t *out, wsync_error *err)
{
    uint32_t g;
    for (g = 0; g < h->n_targets; g++)
        if (h->targets[g].rank == rank && h->targets[g].region == region) break;
    if (g == h->n_targets) {
        if (!wsync__ctl_grow(&c->a, (void **)&h->targets, &h->cap_targets, h->n_targets, sizeof *h->targets))
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: targets of %s", h->name);
        h->targets[g].rank = rank;
        h->targets[g].region = region;
        h->targets[g].desc = *desc;
        h->n_targets++;
    }
    *out = g;
    return WSYNC_OK;
}

static wsync_result wsync__ctl_push_xfer(wsync_controller *c, wsync__ctl_member *h, const wsync_ctl_transfer *x,
                                         uint64_t bytes, wsync_error *err)
{
    if (!wsync__ctl_grow(&c->a, (void **)&h->xfers, &h->cap_xfers, h->n_xfers, sizeof *h->xfers))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: transfers of %s", h->name);
    h->xfers[h->n_xfers++] = *x;
    h->bytes += bytes;
    return WSYNC_OK;
}

/* Trainer i's gather inbox entry, or NULL. */
static const wsync_ctl_tensor *wsync__ctl_inbox(const wsync_controller *c, uint32_t i)
{
    uint32_t t;
    for (t = 0; t < c->m[i].join.n_tensors; t++)
        if (strcmp(c->m[i].join.tensors[t].name, WSYNC_CTL_INBOX) == 0) return &c->m[i].join.tensors[t];
    return NULL;
}

/* Fetch f of the plan: its holder writes rows of its shard, as bf16, into
   the gathering trainer's inbox at `at` (the preparation's place there),
   in the gather phase 2g of the preparation's mesh group g. */
static wsync_result wsync__ctl_fetch(wsync_controller *c, const wsync_ctl_plan_input *pi, const wsync_plan *p,
                                     const wsync_plan_fetch *f, uint64_t at, wsync_error *err)
{
    const wsync_plan_prep *pr = &p->preps[f->prep];
    const wsync_plan_piece *pc = &p->pieces[f->piece];
    uint32_t i = pr->rank, j = f->holder, T = c->nt, e = pi->holder_entry[(uint64_t)pc->source * T + j], tg;
    const wsync_ctl_tensor *ib = wsync__ctl_inbox(c, i), *tj;
    uint64_t cols;
    wsync_ctl_transfer x;
    wsync_result r;
    tj = e == UINT32_MAX ? NULL : &c->m[j].join.tensors[e];
    if (!tj || tj->row_begin > f->row0 || tj->row_begin + tj->row_count < f->row0 + f->rows)
        return wsync_error_set(err, WSYNC_ERR_NOT_FOUND,
                                "plan: %s is to write rows %llu to %llu of source %u into %s's gather inbox and does "
                                "not hold them",
                                c->m[j].name, (unsigned long long)f->row0, (unsigned long long)(f->row0 + f->rows - 1),
                                pc->source, c->m[i].name);
    cols = wsync__ctl_cols(tj);
    if ((r = wsync__ctl_target(c, &c->m[j], c->ni + i, ib->region, &c->m[i].join.regions[ib->region], &tg, err)) !=
        WSYNC_OK)
        return r;
    memset(&x, 0, sizeof x);
    x.src_region = tj->region;
    x.target = tg;
    x.src_offset = tj->offset + (f->row0 - tj->row_begin) * cols * 2 + pc->col0 * 2;
    x.dst_offset = ib->offset + at + f->dst_offset;
    x.rows = f->rows;
    x.src_stride = cols * 2;
    x.len = f->len;
    if (pc->cols == cols) x.rows = 1, x.src_stride = 0;
    x.group = 2 * pr->group;
    return wsync__ctl_push_xfer(c, &c->m[j], &x, x.len, err);
}

/* A row-sharded fp8 preparation at trainer i (rows [pc->row0, +pc->rows)
   of a source, columns [pc->col0, +pc->cols)), gathered into i's inbox at
   `at` by the plan's fetches: one fp8 transfer from the inbox to the
   inference entry `it` of member mi in group 2g + 1. */
static wsync_result wsync__ctl_gather(wsync_controller *c, uint32_t i, const wsync_plan_piece *pc, uint32_t g,
                                      uint64_t at, const wsync_ctl_tensor *inbox, uint32_t mi,
                                      const wsync_ctl_tensor *it, uint64_t start, wsync_error *err)
{
    uint32_t T = c->nt, tg;
    uint64_t rowb = pc->cols * 2;
    wsync_ctl_transfer x;
    wsync_result r;
    if ((r = wsync__ctl_target(c, &c->m[i], mi - T, it->region, &c->m[mi].join.regions[it->region], &tg, err)) !=
        WSYNC_OK)
        return r;
    memset(&x, 0, sizeof x);
    x.src_region = inbox->region;
    x.target = tg;
    x.src_offset = at;
    x.rows = pc->rows;
    x.src_stride = rowb;
    x.len = pc->rows * pc->cols;
    x.dst_offset = it->offset + (pc->row0 - it->row_begin) * pc->cols;
    x.prep = WSYNC_CTL_PREP_FP8;
    x.block = it->block;
    x.scale_offset = it->scale_offset + (it->block ? (pc->row0 - it->row_begin) / it->block *
                                                         wsync_quantize_scale_count(1, pc->cols, it->block) * 4
                                                   : 0);
    x.group = 2 * g + 1;
    if (c->pace > 0) {
        double us = (double)start / c->pace * 1e6;
        x.start_us = us < 4e9 ? (uint32_t)us : 4000000000u;
    }
    return wsync__ctl_push_xfer(c, &c->m[i], &x, x.len + 4 * wsync_quantize_scale_count(x.rows, pc->cols, x.block),
                                err);
}

/* The planner's schedule: the JOINs as its input (wsync_ctl_plan_input_build),
   the plan built, and each trainer's tasks turned into its transfers one for
   one, in the plan's order (the fp8 scale tasks go with their data task's
   transfer). A FETCH preparation (row-sharded fp8 whose rows its sender
   does not all hold) is executed through the sender's gather inbox: the
   plan's fetches write the rows there (wsync__ctl_fetch), then its tasks
   quantize from it (wsync__ctl_gather); the plan's mesh group g becomes a
   gather phase 2g and the writes 2g + 1, for every group, when the plan
   has any fetch. */
static wsync_result wsync__ctl_plan_sched(wsync_controller *c, wsync_error *err)
{
    const wsync_ctl_tensor **tl;
    uint32_t *nl, i, T = c->nt;
    wsync_ctl_plan_input pi;
    wsync_plan *p = NULL;
    wsync_result r;
    uint64_t k, *need = NULL, *at = NULL;
    tl = (const wsync_ctl_tensor **)wsync__rdma_alloc(&c->a, (size_t)(c->nt + c->ni) * sizeof *tl);
    nl = (uint32_t *)wsync__rdma_alloc(&c->a, (size_t)(c->nt + c->ni) * sizeof *nl);
    if (!tl || !nl) {
        wsync__rdma_free(&c->a, tl);
        wsync__rdma_free(&c->a, nl);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: ranks");
    }
    for (i = 0; i < c->nt + c->ni; i++) {
        tl[i] = c->m[i].join.tensors;
        nl[i] = c->m[i].join.n_tensors;
    }
    r = wsync_ctl_plan_input_build(tl, nl, c->nt, c->ni, &c->a, &pi, err);
    wsync__rdma_free(&c->a, tl);
    wsync__rdma_free(&c->a, nl);
    if (r != WSYNC_OK) return r;
    if ((r = wsync_plan_build(&pi.input, &c->popt, &p, err)) != WSYNC_OK) goto out;
    c->gphase = 0;
    need = (uint64_t *)wsync__rdma_alloc(&c->a, (size_t)T * sizeof *need);
    at = (uint64_t *)wsync__rdma_alloc(&c->a, (size_t)(p->n_preps ? p->n_preps : 1) * sizeof *at);
    if (!need || !at) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: gathers");
        goto out;
    }
    for (i = 0; i < T; i++) {
        c->m[i].n_targets = c->m[i].n_xfers = 0;
        c->m[i].bytes = 0;
        need[i] = 0;
    }
    for (k = 0; k < p->n_preps; k++) at[k] = UINT64_MAX;
    /* the gathers: which preparations need one, and each sender's inbox bytes */
    for (i = 0; i < T; i++)
        for (k = p->rank_first[i]; k < p->rank_first[i + 1]; k++) {
            const wsync_plan_task *tk = &p->tasks[k];
            const wsync_plan_prep *pr = &p->preps[tk->prep];
            const wsync_plan_piece *pc = &p->pieces[pr->first_piece];
            if (!(pr->flags & WSYNC_PLAN_FETCH) || at[tk->prep] != UINT64_MAX) continue;
            if (pr->n_pieces != 1 || pr->dtype != WSYNC_DTYPE_F8_E4M3) {
                r = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                     "plan: %s gathers rows %llu to %llu of source %u from other trainers into a "
                                     "buffer of %llu pieces, to %s (the gather between trainers runs for fp8 tiles "
                                     "of one tensor only)",
                                     c->m[i].name, (unsigned long long)pc->row0,
                                     (unsigned long long)(pc->row0 + pr->rows - 1), pc->source,
                                     (unsigned long long)pr->n_pieces, wsync_dtype_name((wsync_dtype)pr->dtype));
                goto out;
            }
            at[tk->prep] = need[i]; /* offset into i's inbox */
            need[i] += (pc->rows * pc->cols * 2 + 7) & ~(uint64_t)7;
            c->gphase = 1;
        }
    for (i = 0; i < T && r == WSYNC_OK; i++) {
        const wsync_ctl_tensor *ib = wsync__ctl_inbox(c, i);
        uint64_t have = 0;
        if (!need[i]) continue;
        if (ib && wsync_ctl_tensor_bytes(ib, NULL, &have, NULL) != WSYNC_OK) have = 0;
        if (have < need[i])
            r = wsync_error_set(err, WSYNC_ERR_LIMIT,
                                 "plan: %s gathers the rows of fp8 tiles across shard boundaries and needs a gather "
                                 "inbox ('%s') of %llu bytes; it declared %llu",
                                 c->m[i].name, WSYNC_CTL_INBOX, (unsigned long long)need[i],
                                 (unsigned long long)have);
    }
    for (i = 0; i < T && r == WSYNC_OK; i++)
        for (k = p->rank_first[i]; k < p->rank_first[i + 1] && r == WSYNC_OK; k++) {
            const wsync_plan_task *tk = &p->tasks[k];
            const wsync_plan_prep *pr = &p->preps[tk->prep];
            const wsync_plan_unit *un = &pi.input.units[pr->unit];
            const wsync_plan_piece *pc = &p->pieces[pr->first_piece];
            const wsync_ctl_tensor *it = NULL, *tt;
            uint32_t e, mi = T + tk->dst_rank;
            uint64_t d, end = pr->out_row0 + pr->rows, urows = pi.input.pieces[un->first_piece].rows;
            if (tk->flags & WSYNC_PLAN_SCALES) continue;
            for (d = un->first_dest; d < un->first_dest + un->n_dests; d++)
                if (pi.input.dests[d].rank == tk->dst_rank) it = &c->m[mi].join.tensors[pi.dest_entry[d]];
            e = pi.holder_entry[(uint64_t)pc->source * T + i];
            tt = e == UINT32_MAX ? NULL : &c->m[i].join.tensors[e];
            if (it && wsync__ctl_fp8(it) && !it->block && pr->rows != urows)
                r = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                     "plan: tensor '%s': %s wants one fp8 scale for all its rows (block 0), and the "
                                     "plan cuts them at rows %llu to %llu (row shards: use tiles of a divisor of %u "
                                     "rows)",
                                     it->name, c->m[mi].name, (unsigned long long)pr->out_row0,
                                     (unsigned long long)end - 1, (unsigned)WSYNC_PLAN_BLOCK);
            else if (it && wsync__ctl_fp8(it) && it->block &&
                     (pr->out_row0 % it->block || (end < urows && end % it->block)))
                r = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                     "plan: tensor '%s': fp8 rows %llu to %llu of %s are not whole tiles of %u rows",
                                     it->name, (unsigned long long)pr->out_row0, (unsigned long long)end - 1,
                                     c->m[mi].name, (unsigned)it->block);
            else if (it && at[tk->prep] != UINT64_MAX && wsync__ctl_fp8(it)) {
                const wsync_ctl_tensor *ib = wsync__ctl_inbox(c, i);
                /* every receiver of the rows quantizes the same inbox bytes */
                r = wsync__ctl_gather(c, i, pc, tk->group, ib->offset + at[tk->prep], ib, mi, it, tk->start, err);
            } else if (!it || pr->n_pieces != 1 || !tt || tt->row_begin > pc->row0 ||
                       tt->row_begin + tt->row_count < pc->row0 + pc->rows)
                r = wsync_error_set(err, WSYNC_ERR_UNSUPPORTED,
                                     "plan: tensor '%s': %s sends rows %llu to %llu and does not hold them all (the "
                                     "gather between trainers runs for fp8 tiles only)",
                                     it ? it->name : "?", c->m[i].name, (unsigned long long)pc->row0,
                                     (unsigned long long)(pc->row0 + pc->rows - 1));
            else {
                uint32_t before = c->m[i].n_xfers;
                r = wsync__ctl_add(c, &c->m[i], tt, mi, it, pc->row0, pc->row0 + pc->rows, 0, err);
                if (r == WSYNC_OK && c->m[i].n_xfers > before) {
                    wsync_ctl_transfer *x = &c->m[i].xfers[c->m[i].n_xfers - 1];
                    if (c->pace > 0) { /* its planned start */
                        double us = (double)tk->start / c->pace * 1e6;
                        x->start_us = us < 4e9 ? (uint32_t)us : 4000000000u;
                    }
                    if (c->gphase) x->group = 2 * tk->group + 1;
                }
            }
        }
    /* the gathers: the plan's fetches, each holder's in the plan's order */
    for (k = 0; k < p->n_fetches && r == WSYNC_OK; k++)
        r = wsync__ctl_fetch(c, &pi, p, &p->fetches[k], at[p->fetches[k].prep], err);
    if (r == WSYNC_OK) {
        c->pplan = p;
        p = NULL;
    }
out:
    wsync__rdma_free(&c->a, need);
    wsync__rdma_free(&c->a, at);
    wsync_plan_free(p);
    wsync_ctl_plan_input_free(&pi);
    return r;
}

/* Mesh groups: as many as the highest group a trainer entry names, plus
   one; each trainer's transfers ordered by group, stably (a counting sort:
   at most WSYNC_CTL_GROUPS_MAX groups). */
static wsync_result wsync__ctl_group_order(wsync_controller *c, wsync_error *err)
{
    unsigned i, t;
    uint32_t g, k;
    c->n_groups = 1;
    for (i = 0; i < c->nt; i++)
        for (t = 0; t < c->m[i].join.n_tensors; t++)
            if (c->m[i].join.tensors[t].group + 1 > c->n_groups) c->n_groups = c->m[i].join.tensors[t].group + 1;
    if (c->gphase && c->pplan) { /* a gather phase before each group's writes */
        if (2 * c->n_groups > WSYNC_CTL_GROUPS_MAX)
            return wsync_error_set(err, WSYNC_ERR_LIMIT,
                                    "plan: %u mesh groups, each with a gather phase: more than %u", c->n_groups,
                                    WSYNC_CTL_GROUPS_MAX);
        c->n_groups *= 2;
    }
    if (c->n_groups == 1) return WSYNC_OK;
    for (i = 0; i < c->nt; i++) {
        wsync__ctl_member *h = &c->m[i];
        wsync_ctl_transfer *sorted;
        if (h->n_xfers < 2) continue;
        sorted = (wsync_ctl_transfer *)wsync__rdma_alloc(&c->a, (size_t)h->n_xfers * sizeof *sorted);
        if (!sorted) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: ordering %s", h->name);
        for (g = 0, k = 0; g < c->n_groups; g++)
            for (t = 0; t < h->n_xfers; t++)
                if (h->xfers[t].group == g) sorted[k++] = h->xfers[t];
        wsync__rdma_free(&c->a, h->xfers);
        h->xfers = sorted;
        h->cap_xfers = h->n_xfers;
    }
    return WSYNC_OK;
}

static void wsync__ctl_plan_stats(wsync_controller *c)
{
    unsigned i;
    wsync_controller_plan *p = &c->plan;
    memset(p, 0, sizeof *p);
    p->min_trainer_bytes = UINT64_MAX;
    for (i = 0; i < c->nt; i++) {
        uint32_t j;
        p->transfers += c->m[i].n_xfers;
        p->bytes += c->m[i].bytes;
        for (j = 0; j < c->m[i].n_xfers; j++)
            if (c->m[i].targets[c->m[i].xfers[j].target].rank >= c->ni) {
                p->gather_transfers++;
                p->gather_bytes += c->m[i].xfers[j].len;
            }
        if (c->m[i].bytes > p->max_trainer_bytes) p->max_trainer_bytes = c->m[i].bytes;
        if (c->m[i].bytes < p->min_trainer_bytes) p->min_trainer_bytes = c->m[i].bytes;
    }
    for (i = c->nt; i < c->nt + c->ni; i++) {
        uint64_t b = 0, rb = 0, tb = 0;
        uint32_t t;
        for (t = 0; t < c->m[i].join.n_tensors; t++) {
            const wsync_ctl_tensor *it = &c->m[i].join.tensors[t];
            if (wsync_ctl_tensor_bytes(it, &rb, &tb, NULL) != WSYNC_OK) continue;
            b += tb;
            if (wsync__ctl_fp8(it)) b += 4 * wsync_quantize_scale_count(it->row_count, rb, it->block);
        }
        if (b > p->max_inference_bytes) p->max_inference_bytes = b;
    }
}

static void wsync__ctl_fail_all(wsync_controller *c, const wsync_error *e)
{
    unsigned i;
    for (i = 0; i < c->nt + c->ni; i++)
        if (c->m[i].fd >= 0 && !c->m[i].gone)
            wsync__ctl_send_text(c->m[i].fd, &c->m[i].sess, WSYNC_CTL_ERROR, 0, e->code, e->message, c->m[i].name,
                                 NULL);
}

#define WSYNC__CTL_PENDING 64
#define WSYNC__CTL_JOIN_PIECE_MS 1000

static int wsync__ctl_name_lt(const void *ctx, uint32_t a, uint32_t b)
{
    const char *const *nm = (const char *const *)ctx;
    return strcmp(nm[a], nm[b]) < 0;
}

/* After the plan, what a step's check (wsync__ctl_check_ran) needs: the
   tensors each trainer's transfers read, and one id per tensor name over
   all trainers (trainers holding rows of one tensor name it alike). */
static wsync_result wsync__ctl_names(wsync_controller *c, wsync_error *err)
{
    uint64_t total = 0;
    uint32_t *order = NULL, *flat = NULL, k, q, e, id = 0;
    const char **nm = NULL;
    unsigned i;
    wsync_result r = WSYNC_OK;
    for (i = 0; i < c->nt; i++) {
        wsync__ctl_member *m = &c->m[i];
        if ((r = wsync__ctl_reads(&c->a, m->join.tensors, m->join.n_tensors, m->xfers, m->n_xfers, &m->reads_off,
                                  &m->reads, err)) != WSYNC_OK ||
            (r = wsync__ctl_reads_inbox(&c->a, m->join.tensors, m->join.n_tensors, m->xfers, m->n_xfers, m->targets,
                                        c->ni + i, &m->reads_off, &m->reads, err)) != WSYNC_OK)
            return r;
        if (!(m->name_id = (uint32_t *)wsync__rdma_alloc(&c->a, ((size_t)m->join.n_tensors + 1) * sizeof *m->name_id)))
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "the trainers' tensor names");
        total += m->join.n_tensors;
    }
    if (total >= UINT32_MAX)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "%llu trainer tensors", (unsigned long long)total);
    nm = (const char **)wsync__rdma_alloc(&c->a, ((size_t)total + 1) * sizeof *nm);
    order = (uint32_t *)wsync__rdma_alloc(&c->a, ((size_t)total + 1) * sizeof *order);
    flat = (uint32_t *)wsync__rdma_alloc(&c->a, ((size_t)total + 1) * sizeof *flat);
    c->named = (uint32_t *)wsync__rdma_alloc(&c->a, ((size_t)total + 1) * sizeof *c->named);
    if (!nm || !order || !flat || !c->named) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "the trainers' tensor names");
        goto out;
    }
    for (i = 0, k = 0; i < c->nt; i++)
        for (e = 0; e < c->m[i].join.n_tensors; e++, k++) {
            nm[k] = c->m[i].join.tensors[e].name;
            order[k] = k;
        }
    wsync__ctl_sort(order, (uint32_t)total, wsync__ctl_name_lt, nm);
    for (q = 0; q < total; q++) {
        if (q && strcmp(nm[order[q]], nm[order[q - 1]]) != 0) id++;
        flat[order[q]] = id;
    }
    c->n_names = total ? id + 1 : 0;
    for (i = 0, k = 0; i < c->nt; i++)
        for (e = 0; e < c->m[i].join.n_tensors; e++) c->m[i].name_id[e] = flat[k++];
out:
    wsync__rdma_free(&c->a, nm);
    wsync__rdma_free(&c->a, order);
    wsync__rdma_free(&c->a, flat);
    return r;
}

/* The handshake cut when all WSYNC__CTL_PENDING are taken and another
   connection comes: one from the host with the most connections in their
   handshakes (a flood from one host never cuts a rank on another), then
   one that has not sent its HELLO before one that has (a silent flood
   never cuts a rank that said who it is), then the oldest. A flood of
   HELLOs from a rank's own host can still cut its handshake (README: What
   is not protected). */
static unsigned wsync__ctl_pend_victim(const wsync__ctl_pend *pend, unsigned np)
{
    unsigned k, j, best = 0, best_n = 0;
    for (k = 0; k < np; k++) {
        unsigned n = 0;
        for (j = 0; j < np; j++) n += pend[j].host == pend[k].host; /* 64 x 64, only when the slots are full */
        if (k == 0 || n > best_n ||
            (n == best_n && (pend[k].phase < pend[best].phase ||
                             (pend[k].phase == pend[best].phase && pend[k].order < pend[best].order)))) {
            best = k;
            best_n = n;
        }
    }
    return best;
}

/* Sends m to member i; a failed send marks the member gone. */
static wsync_result wsync__ctl_send_to(wsync_controller *c, unsigned i, const wsync_ctl_msg *m, wsync_error *err)
{
    wsync_result r = wsync__ctl_send(c->m[i].fd, &c->m[i].sess, m, &c->a, c->m[i].name, err);
    if (r != WSYNC_OK) c->m[i].gone = 1;
    return r;
}

WSYNC_DEF wsync_result wsync_controller_accept(wsync_controller *c, wsync_error *err)
{
    int64_t deadline;
    wsync__ctl_pend *pend;
    char why_greedy[160] = "";
    unsigned i, joined = 0, np = 0;
    uint64_t accepted = 0;
    wsync_error local;
    wsync_result r;
    if (!err) err = &local;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!c || c->accepted)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "accept: once per controller");
    deadline = wsync__rdma_now_ms() + c->join_ms;
    if (!(pend = (wsync__ctl_pend *)wsync__rdma_alloc(&c->a, WSYNC__CTL_PENDING * sizeof *pend)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "accept: the handshakes");
    for (;;) {
        /* connections in their handshake wait here, polled with the
           listener and read as their bytes come, so that one that is slow
           or silent holds up nobody; each has WSYNC__CTL_AUTH_MS from its
           accept for the whole handshake; the JOIN of an authenticated one
           is read once its first bytes are in, each later piece within
           WSYNC__CTL_JOIN_PIECE_MS */
        struct pollfd pf[1 + WSYNC__CTL_PENDING];
        int64_t left, now, wait;
        int fd, pr;
        unsigned k;
        for (joined = 0, i = 0; i < c->nt + c->ni; i++) joined += c->m[i].fd >= 0;
        if (joined == c->nt + c->ni) break;
        left = deadline - wsync__rdma_now_ms();
        if (left <= 0) {
            char missing[256];
            wsync__ctl_missing(c, missing, sizeof missing);
            r = wsync_error_set(err, WSYNC_ERR_LIMIT, "controller: %u of %u ranks joined within %u ms; missing: %s",
                                 joined, c->nt + c->ni, c->join_ms, missing);
            wsync__ctl_fail_all(c, err);
            for (k = 0; k < np; k++) close(pend[k].fd);
            wsync__rdma_free(&c->a, pend);
            return r;
        }
        now = wsync__rdma_now_ms();
        wait = left;
        for (k = np; k-- > 0;) { /* handshakes past their time go */
            if (pend[k].until <= now) {
                char why[120];
                snprintf(why, sizeof why, "no %s within %d ms of connecting", pend[k].phase ? "PROOF" : "HELLO",
                         WSYNC__CTL_AUTH_MS);
                wsync__ctl_refuse(c, pend[k].peer, why);
                close(pend[k].fd);
                pend[k] = pend[--np];
            } else if (pend[k].until - now < wait)
                wait = pend[k].until - now;
        }
        pf[0].fd = c->lfd;
        pf[0].events = POLLIN;
        pf[0].revents = 0;
        for (k = 0; k < np; k++) {
            pf[1 + k].fd = pend[k].fd;
            pf[1 + k].events = POLLIN;
            pf[1 + k].revents = 0;
        }
        pr = poll(pf, 1 + np, (int)wait);
        if (pr <= 0) continue;
        for (k = np; k-- > 0;) {
            if (!pf[1 + k].revents) continue;
            left = deadline - wsync__rdma_now_ms();
            if (!wsync__ctl_pend_read(c, &pend[k], left > WSYNC__CTL_JOIN_PIECE_MS ? WSYNC__CTL_JOIN_PIECE_MS
                                                                                   : left > 0 ? (int)left : 1))
                pend[k] = pend[--np]; /* entries above k are done with */
        }
        if (!(pf[0].revents & POLLIN)) continue;
        fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        if (np == WSYNC__CTL_PENDING) { /* one goes: wsync__ctl_pend_victim */
            char why[160];
            k = wsync__ctl_pend_victim(pend, np);
            if (pend[k].phase)
                snprintf(why, sizeof why, "handshake cut after its HELLO as %s rank %u: too many connections in "
                         "their handshakes", wsync__ctl_role_name(pend[k].role), (unsigned)pend[k].rank);
            else
                snprintf(why, sizeof why, "%s", "handshake cut before its HELLO: too many connections in their "
                         "handshakes");
            wsync__ctl_refuse(c, pend[k].peer, why);
            close(pend[k].fd);
            pend[k] = pend[--np];
        }
        memset(&pend[np], 0, sizeof pend[np]);
        pend[np].order = ++accepted;
        pend[np].fd = fd;
        pend[np].until = wsync__rdma_now_ms() + WSYNC__CTL_AUTH_MS;
        wsync__ctl_peer_name(fd, pend[np].peer, sizeof pend[np].peer);
        {
            const char *colon = strrchr(pend[np].peer, ':');
            size_t hl = colon ? (size_t)(colon - pend[np].peer) : strlen(pend[np].peer);
            pend[np].host = wsync_digest(pend[np].peer, hl);
        }
        wsync__ctl_nodelay(fd);
        np++;
    }
    for (i = 0; i < np; i++) { /* still in their handshakes: no rank is missing */
        wsync__ctl_refuse(c, pend[i].peer, "handshake cut: every rank of the job has joined");
        close(pend[i].fd);
    }
    wsync__rdma_free(&c->a, pend);
    /* the greedy mapping checks what every schedule needs (names, shapes,
       coverage) with its messages; the planner's schedule then replaces it */
    if ((r = wsync__ctl_plan(c, err)) != WSYNC_OK) {
        wsync__ctl_fail_all(c, err);
        return r;
    }
    if (c->schedule != WSYNC_CTL_SCHEDULE_GREEDY) {
        wsync_error pe;
        wsync_error_set(&pe, WSYNC_OK, NULL);
        if ((r = wsync__ctl_plan_sched(c, &pe)) != WSYNC_OK) {
            if (c->schedule == WSYNC_CTL_SCHEDULE_PLAN || c->no_greedy[0]) { /* no fallback */
                if (err) *err = pe;
                wsync__ctl_fail_all(c, &pe);
                return r;
            }
            snprintf(why_greedy, sizeof why_greedy, "%.150s", pe.message);
            for (i = 0; i < c->nt; i++) { /* AUTO: back to the greedy mapping */
                c->m[i].n_targets = c->m[i].n_xfers = 0;
                c->m[i].bytes = 0;
            }
            if ((r = wsync__ctl_plan(c, err)) != WSYNC_OK) {
                wsync__ctl_fail_all(c, err);
                return r;
            }
        }
    }
    if ((r = wsync__ctl_group_order(c, err)) != WSYNC_OK) {
        wsync__ctl_fail_all(c, err);
        return r;
    }
    wsync__ctl_plan_stats(c);
    if ((r = wsync__ctl_names(c, err)) != WSYNC_OK) {
        wsync__ctl_fail_all(c, err);
        return r;
    }
    for (i = c->nt; i < c->nt + c->ni; i++) { /* each inference rank's writers, for its window */
        wsync__ctl_member *m = &c->m[i];
        unsigned t;
        uint32_t g;
        if (!(m->senders = (uint32_t *)wsync__rdma_alloc(&c->a, (size_t)c->nt * sizeof *m->senders))) {
            r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "the inference ranks' writers");
            wsync__ctl_fail_all(c, err);
            return r;
        }
        for (t = 0; t < c->nt; t++)
            for (g = 0; g < c->m[t].n_targets; g++)
                if (c->m[t].targets[g].rank == i - c->nt) {
                    m->senders[m->n_senders++] = t;
                    break;
                }
    }
    if ((r = wsync__ctl_stg_targets(c, err)) != WSYNC_OK) {
        wsync__ctl_fail_all(c, err);
        return r;
    }
    c->plan.schedule = c->pplan ? WSYNC_CTL_SCHEDULE_PLAN : WSYNC_CTL_SCHEDULE_GREEDY;
    c->plan.groups = c->n_groups;
    c->plan.digest = c->pplan ? wsync_plan_digest(c->pplan) : 0;
    snprintf(c->plan.why_greedy, sizeof c->plan.why_greedy, "%s", why_greedy);
    for (i = 0; i < c->nt + c->ni; i++) {
        wsync__ctl_member *m = &c->m[i];
        wsync_ctl_msg a;
        memset(&a, 0, sizeof a);
        a.type = WSYNC_CTL_ASSIGN;
        a.role = i < c->nt ? WSYNC_CTL_TRAINER : WSYNC_CTL_INFERENCE;
        a.rank = i < c->nt ? i : i - c->nt;
        a.n_trainers = c->nt;
        a.n_inference = c->ni;
        a.n_targets = m->n_targets;
        a.targets = m->targets;
        a.n_transfers = m->n_xfers;
        a.n_groups = c->n_groups;
        a.transfers = m->xfers;
        if ((r = wsync__ctl_send_to(c, i, &a, err)) != WSYNC_OK) return r;
    }
    c->accepted = 1;
    return WSYNC_OK;
}

static wsync_result wsync__ctl_gone(wsync_controller *c, wsync_error *err)
{
    unsigned i;
    for (i = 0; i < c->nt + c->ni; i++)
        if (c->m[i].gone)
            return wsync_error_set(err, WSYNC_ERR_IO,
                                    "%s is gone (a failed step lost it); the group must be restarted", c->m[i].name);
    return WSYNC_OK;
}

/* ---- the controller's step loop: go, the transfer, finish >>ctl-step ---- */

static void wsync__ctl_abort(wsync_controller *c, uint64_t step, const wsync_error *why)
{
    unsigned i;
    c->in_step = 0;
    for (i = 0; i < c->nt + c->ni; i++) /* trainers too: one may wait at a barrier */
        if (!c->m[i].gone &&
            wsync__ctl_send_text(c->m[i].fd, &c->m[i].sess, WSYNC_CTL_ABORT, step, why->code, why->message,
                                 c->m[i].name, NULL) != WSYNC_OK)
            c->m[i].gone = 1;
}

static wsync_result wsync__ctl_collect(wsync_controller *c, unsigned from, unsigned to, uint32_t type, uint64_t step,
                                       wsync_error *err);

WSYNC_DEF wsync_result wsync_controller_go(wsync_controller *c, uint64_t step, wsync_error *err)
{
    unsigned i;
    wsync_ctl_msg g;
    wsync_error local;
    wsync_result r;
    if (!err) err = &local;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!c || !c->accepted) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "go: accept first");
    if (step <= c->last_step || step <= c->go_step) /* an aborted step's number is not reused */
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                "go: step %llu after step %llu (steps increase, from 1)", (unsigned long long)step,
                                (unsigned long long)(c->go_step > c->last_step ? c->go_step : c->last_step));
    if ((r = wsync__ctl_gone(c, err)) != WSYNC_OK) return r;
    c->go_step = step;
    c->in_step = 1;
    /* the inference ranks open their write windows to their planned
       writers, and say so, before any trainer writes */
    memset(&g, 0, sizeof g);
    g.type = WSYNC_CTL_OPEN;
    g.step = step;
    for (i = c->nt; i < c->nt + c->ni; i++) {
        g.n_senders = c->m[i].n_senders;
        g.senders = c->m[i].senders;
        if ((r = wsync__ctl_send_to(c, i, &g, err)) != WSYNC_OK) {
            wsync__ctl_abort(c, step, err);
            return r;
        }
    }
    if ((r = wsync__ctl_collect(c, c->nt, c->nt + c->ni, WSYNC_CTL_ACK, step, err)) != WSYNC_OK) {
        wsync__ctl_abort(c, step, err);
        return r;
    }
    memset(&g, 0, sizeof g);
    g.type = WSYNC_CTL_GO;
    g.step = step;
    c->t_go = wsync__ctl_now();
    for (i = 0; i < c->nt; i++)
        if ((r = wsync__ctl_send_to(c, i, &g, err)) != WSYNC_OK) {
            wsync__ctl_abort(c, step, err);
            return r;
        }
    return WSYNC_OK;
}

/* A trainer's BARRIER for mesh group g of the step (next[]: the group each
   trainer reaches next); once every trainer reached it, RELEASE to all. */
static wsync_result wsync__ctl_barrier(wsync_controller *c, unsigned i, uint32_t g, uint64_t step,
                                       unsigned char *next, uint32_t *reached, wsync_error *err)
{
    unsigned k;
    wsync_ctl_msg rel;
    wsync_result r;
    if (g != next[i] || g + 1 >= c->n_groups)
        return wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s reached mesh group %u's barrier, expected %u of %u",
                                (unsigned long long)step, c->m[i].name, (unsigned)g, (unsigned)next[i],
                                (unsigned)c->n_groups - 1);
    next[i]++;
    if (++reached[g] < c->nt) return WSYNC_OK;
    memset(&rel, 0, sizeof rel);
    rel.type = WSYNC_CTL_RELEASE;
    rel.step = step;
    rel.group = g;
    for (k = 0; k < c->nt; k++)
        if ((r = wsync__ctl_send_to(c, k, &rel, err)) != WSYNC_OK) return r;
    return WSYNC_OK;
}

/* A step with mesh groups: the trainers in [from, to) but `skip` with no
   DONE yet that have not reached a barrier where another trainer waits
   (the first one's barrier), named in out ("trainer rank 0, trainer rank
   2"; eight, then how many more). Their count; 0 when none. When more
   than one lags, one may be stalled and the others blocked writing into
   its gather inbox: the controller cannot tell which, so it names all. */
static void wsync__ctl_name_add(char *out, size_t cap, size_t *len, unsigned n, const char *name)
{
    if (n < 8 && *len < cap) {
        int k = snprintf(out + *len, cap - *len, "%s%s", n ? ", " : "", name);
        if (k > 0) *len += (size_t)k;
    }
}

static void wsync__ctl_name_end(char *out, size_t cap, size_t len, unsigned n)
{
    if (n > 8 && len < cap) snprintf(out + len, cap - len, " and %u more", n - 8);
}

static unsigned wsync__ctl_lagging(const wsync_controller *c, unsigned from, unsigned to, unsigned skip,
                                   const unsigned char *got, const unsigned char *next, const uint32_t *reached,
                                   unsigned *group, char *out, size_t cap)
{
    unsigned i, n = 0;
    size_t len = 0;
    out[0] = 0;
    if (c->n_groups < 2) return 0;
    for (i = from; i < to; i++) {
        if (i == skip || got[i - from] || next[i] + 1u >= c->n_groups || reached[next[i]] == 0) continue;
        if (n > 0 && next[i] != *group) continue;
        if (n == 0) *group = next[i];
        wsync__ctl_name_add(out, cap, &len, n++, c->m[i].name);
    }
    wsync__ctl_name_end(out, cap, len, n);
    return n;
}

/* A member in [from, to) but `skip`, with no reply yet, whose connection
   closes within wait_ms (its process died), or `to`. It only peeks: a
   member's pending messages stay for the caller. */
static unsigned wsync__ctl_closed(const wsync_controller *c, unsigned from, unsigned to, unsigned skip,
                                const unsigned char *got, struct pollfd *pf, int wait_ms)
{
    unsigned i, n = to - from;
    int64_t end = wsync__rdma_now_ms() + wait_ms;
    for (i = from; i < to; i++) {
        pf[i - from].fd = got[i - from] || i == skip ? -1 : c->m[i].fd;
        pf[i - from].events = POLLIN;
        pf[i - from].revents = 0;
    }
    for (;;) {
        int64_t left = end - wsync__rdma_now_ms();
        int pr = poll(pf, n, left > 0 ? (int)left : 0);
        if (pr < 0 && errno != EINTR) return to;
        for (i = 0; pr > 0 && i < n; i++) {
            char b;
            ssize_t k;
            if (!pf[i].revents) continue;
            if (pf[i].revents & (POLLHUP | POLLERR | POLLNVAL)) return from + i;
            k = recv(pf[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return from + i;
            pf[i].fd = -1; /* a message waits: alive */
        }
        if (left <= 0) return to;
    }
}

/* Collects one answer of `type` for `step` from members [from, to); stale
   answers for earlier steps are skipped. */
static wsync_result wsync__ctl_collect(wsync_controller *c, unsigned from, unsigned to, uint32_t type, uint64_t step,
                                       wsync_error *err)
{
    unsigned i, waiting = to - from;
    unsigned char *got, *next;
    uint32_t reached[WSYNC_CTL_GROUPS_MAX];
    int64_t deadline = wsync__rdma_now_ms() + c->step_ms;
    wsync_result r = WSYNC_OK;
    struct pollfd *pf;
    memset(reached, 0, sizeof reached);
    got = (unsigned char *)wsync__rdma_alloc(&c->a, to - from);
    next = (unsigned char *)wsync__rdma_alloc(&c->a, to);
    pf = (struct pollfd *)wsync__rdma_alloc(&c->a, (to - from) * sizeof *pf);
    if (!got || !pf || !next) {
        wsync__rdma_free(&c->a, got);
        wsync__rdma_free(&c->a, next);
        wsync__rdma_free(&c->a, pf);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "step: poll set");
    }
    while (waiting && r == WSYNC_OK) {
        int64_t left = deadline - wsync__rdma_now_ms();
        int pr;
        if (left <= 0) {
            unsigned nl, lg = 0, gone = wsync__ctl_closed(c, from, to, to, got, pf, 0);
            char names[320] = "";
            /* mesh groups: the trainers the others wait for at a barrier are the ones to name */
            nl = type == WSYNC_CTL_DONE ? wsync__ctl_lagging(c, from, to, to, got, next, reached, &lg, names,
                                                             sizeof names)
                                        : 0;
            if (gone < to) {
                c->m[gone].gone = 1;
                r = wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s went away (no %s within %u ms)",
                                     (unsigned long long)step, c->m[gone].name, wsync__ctl_type_name(type),
                                     c->step_ms);
            } else if (nl)
                r = wsync_error_set(err, WSYNC_ERR_LIMIT,
                                     "step %llu: %s reached no barrier of mesh group %u within %u ms (%u trainer%s "
                                     "wait%s there)",
                                     (unsigned long long)step, names, lg, c->step_ms, (unsigned)reached[lg],
                                     reached[lg] == 1 ? "" : "s", reached[lg] == 1 ? "s" : "");
            else { /* every member still silent */
                size_t len = 0;
                for (i = from, nl = 0; i < to; i++)
                    if (!got[i - from]) wsync__ctl_name_add(names, sizeof names, &len, nl++, c->m[i].name);
                wsync__ctl_name_end(names, sizeof names, len, nl);
                r = wsync_error_set(err, WSYNC_ERR_LIMIT, "step %llu: %s sent no %s within %u ms",
                                     (unsigned long long)step, names, wsync__ctl_type_name(type), c->step_ms);
            }
            break;
        }
        for (i = from; i < to; i++) {
            pf[i - from].fd = got[i - from] ? -1 : c->m[i].fd;
            pf[i - from].events = POLLIN;
            pf[i - from].revents = 0;
        }
        pr = poll(pf, to - from, (int)left);
        if (pr < 0 && errno != EINTR) {
            r = wsync_error_set(err, WSYNC_ERR_IO, "step: poll: %s", strerror(errno));
            break;
        }
        for (i = from; pr > 0 && i < to && r == WSYNC_OK; i++) {
            wsync_ctl_msg m;
            int closed = 0;
            wsync_error e;
            if (!pf[i - from].revents) continue;
            if (wsync__ctl_recv(c->m[i].fd, &c->m[i].sess, 2000, 0, &c->a, &m, c->m[i].name, &closed, &e) != WSYNC_OK) {
                c->m[i].gone = 1;
                r = wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s went away: %s", (unsigned long long)step,
                                     c->m[i].name, e.message);
                break;
            }
            if ((m.type == type || m.type == WSYNC_CTL_BARRIER) && m.step < step) { /* from an aborted step */
            } else if (type == WSYNC_CTL_DONE && m.type == WSYNC_CTL_BARRIER && m.step == step) {
                r = wsync__ctl_barrier(c, i, m.group, step, next, reached, err);
            } else if (type == WSYNC_CTL_DONE && m.type == type && m.step == step && m.status == WSYNC_OK &&
                       next[i] + 1u < c->n_groups) {
                r = wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s sent DONE before mesh group %u's barrier",
                                     (unsigned long long)step, c->m[i].name, (unsigned)next[i]);
            } else if (m.type != type || m.step != step) {
                r = wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s sent %s for step %llu (%s)",
                                     (unsigned long long)step, c->m[i].name, wsync__ctl_type_name(m.type),
                                     (unsigned long long)m.step, m.text);
            } else if (m.status != WSYNC_OK) {
                /* a trainer whose write into another's gather inbox failed
                   reports first, naming an address or a process: the one
                   that died (its connection closes a moment later), else the
                   trainers the others wait for at a barrier, are named */
                unsigned nl = 0, lg = 0, gone = to;
                wsync_result why = m.status < 256 ? (wsync_result)m.status : WSYNC_ERR_IO;
                char names[320] = "";
                if (type == WSYNC_CTL_DONE && c->n_groups > 1) {
                    gone = wsync__ctl_closed(c, from, to, i, got, pf, 250);
                    nl = wsync__ctl_lagging(c, from, to, i, got, next, reached, &lg, names, sizeof names);
                }
                if (gone < to) {
                    c->m[gone].gone = 1;
                    r = wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s went away (%s failed: %s)",
                                         (unsigned long long)step, c->m[gone].name, c->m[i].name, m.text);
                } else if (nl)
                    r = wsync_error_set(err, why,
                                         "step %llu: %s failed while %s reached no barrier of mesh group %u (%u "
                                         "trainer%s wait%s there): %s",
                                         (unsigned long long)step, c->m[i].name, names, lg, (unsigned)reached[lg],
                                         reached[lg] == 1 ? "" : "s", reached[lg] == 1 ? "s" : "", m.text);
                else
                    r = wsync_error_set(err, why, "step %llu: %s failed: %s", (unsigned long long)step, c->m[i].name,
                                         m.text);
            } else {
                got[i - from] = 1;
                waiting--;
                if (type == WSYNC_CTL_DONE) { /* kept for the check */
                    wsync_ctl_msg_free(&c->m[i].done);
                    c->m[i].done = m;
                    memset(&m, 0, sizeof m);
                }
            }
            wsync_ctl_msg_free(&m);
        }
    }
    wsync__rdma_free(&c->a, got);
    wsync__rdma_free(&c->a, next);
    wsync__rdma_free(&c->a, pf);
    return r;
}

/* Every DONE against the plan (see the protocol): the tensors named by any
   trainer (all of them when one named all) make the step; each trainer ran
   exactly its transfers that read one of them, each once. */
static wsync_result wsync__ctl_check_ran(wsync_controller *c, uint64_t step, wsync_error *err)
{
    unsigned i;
    uint32_t j, k, e, all = 0; /* all: 1 + the first trainer that moved every tensor */
    uint64_t tasks = 0, bytes = 0;
    if (c->n_names) memset(c->named, 0, (size_t)c->n_names * sizeof *c->named);
    for (i = 0; i < c->nt; i++) {
        const wsync__ctl_member *m = &c->m[i];
        const wsync_ctl_msg *d = &m->done;
        if (d->n_ran != m->n_xfers)
            return wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s reports %u transfers; its plan has %u",
                                    (unsigned long long)step, m->name, (unsigned)d->n_ran, (unsigned)m->n_xfers);
        if (d->n_named == WSYNC_CTL_NAMED_ALL) {
            if (!all) all = i + 1;
        }
        else if (d->n_named != m->join.n_tensors)
            return wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s names %u tensors; it joined with %u",
                                    (unsigned long long)step, m->name, (unsigned)d->n_named,
                                    (unsigned)m->join.n_tensors);
        else
            for (e = 0; e < d->n_named; e++)
                if (wsync__ctl_bit(d->named, e) && !c->named[m->name_id[e]]) c->named[m->name_id[e]] = i + 1;
    }
    for (i = 0; i < c->nt; i++) {
        const wsync__ctl_member *m = &c->m[i];
        const wsync_ctl_msg *d = &m->done;
        uint32_t ran = 0;
        for (j = 0; j < m->n_xfers; j++) {
            const wsync_ctl_transfer *x = &m->xfers[j];
            uint32_t by = all, r0 = m->reads_off[j], r1 = m->reads_off[j + 1];
            int did = wsync__ctl_bit(d->ran, j);
            const char *tn = r0 < r1 ? m->join.tensors[m->reads[r0]].name : "?";
            for (k = r0; !by && k < r1; k++) by = c->named[m->name_id[m->reads[k]]];
            if (by && !did)
                return wsync_error_set(err, WSYNC_ERR_IO,
                                        "step %llu: %s did not run transfer %u of its plan (%llu bytes of '%.100s' "
                                        "to inference rank %u), which the step includes (%s %s)",
                                        (unsigned long long)step, m->name, (unsigned)j, (unsigned long long)x->len, tn,
                                        (unsigned)m->targets[x->target].rank, c->m[by - 1].name,
                                        all ? "moved every tensor" : "named it");
            if (!by && did)
                return wsync_error_set(err, WSYNC_ERR_IO,
                                        "step %llu: %s ran transfer %u (%llu bytes of '%.100s' to inference rank %u), "
                                        "which the step does not include: no trainer named its tensor",
                                        (unsigned long long)step, m->name, (unsigned)j, (unsigned long long)x->len, tn,
                                        (unsigned)m->targets[x->target].rank);
            if (!did) continue;
            ran++;
            bytes += x->len;
            if (x->prep == WSYNC_CTL_PREP_FP8)
                bytes += 4 * wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block);
        }
        if (d->runs != ran)
            return wsync_error_set(err, WSYNC_ERR_IO, "step %llu: %s ran %u writes for its %u transfers of the step",
                                    (unsigned long long)step, m->name, (unsigned)d->runs, (unsigned)ran);
        tasks += ran;
    }
    c->step_tasks = tasks;
    c->step_bytes = bytes;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_controller_finish(wsync_controller *c, uint64_t step, wsync_error *err)
{
    unsigned i;
    wsync_ctl_msg g;
    wsync_error local;
    wsync_result r;
    if (!err) err = &local;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!c || !c->in_step || step != c->go_step)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "finish: step %llu was not started with go",
                                (unsigned long long)step);
    if ((r = wsync__ctl_collect(c, 0, c->nt, WSYNC_CTL_DONE, step, err)) != WSYNC_OK ||
        (r = wsync__ctl_check_ran(c, step, err)) != WSYNC_OK) {
        wsync__ctl_abort(c, step, err);
        return r;
    }
    c->t_done = wsync__ctl_now();
    memset(&g, 0, sizeof g);
    g.type = WSYNC_CTL_COMMIT;
    g.step = step;
    for (i = c->nt; i < c->nt + c->ni; i++)
        if ((r = wsync__ctl_send_to(c, i, &g, err)) != WSYNC_OK) {
            wsync__ctl_abort(c, step, err);
            return r;
        }
    if ((r = wsync__ctl_collect(c, c->nt, c->nt + c->ni, WSYNC_CTL_ACK, step, err)) != WSYNC_OK) {
        wsync__ctl_abort(c, step, err);
        return r;
    }
    c->t_ack = wsync__ctl_now();
    c->in_step = 0;
    c->last_step = step;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_controller_step(wsync_controller *c, uint64_t step, wsync_error *err)
{
    wsync_result r = wsync_controller_go(c, step, err);
    return r != WSYNC_OK ? r : wsync_controller_finish(c, step, err);
}

WSYNC_DEF void wsync_controller_close(wsync_controller *c)
{
    unsigned i;
    wsync_ctl_msg bye;
    if (!c) return;
    memset(&bye, 0, sizeof bye);
    bye.type = WSYNC_CTL_BYE;
    for (i = 0; c->m && i < c->nt + c->ni; i++) {
        wsync__ctl_member *m = &c->m[i];
        if (m->fd >= 0) {
            if (!m->gone) wsync__ctl_send(m->fd, &m->sess, &bye, &c->a, m->name, NULL);
            close(m->fd);
        }
        wsync_ctl_msg_free(&m->join);
        wsync_ctl_msg_free(&m->done);
        wsync__rdma_free(&c->a, m->targets);
        wsync__rdma_free(&c->a, m->xfers);
        wsync__rdma_free(&c->a, m->reads_off);
        wsync__rdma_free(&c->a, m->reads);
        wsync__rdma_free(&c->a, m->name_id);
        wsync__rdma_free(&c->a, m->senders);
    }
    if (c->lfd >= 0) close(c->lfd);
    wsync__rdma_free(&c->a, c->named);
    wsync_plan_free(c->pplan);
    wsync__rdma_free(&c->a, c->m);
    wsync__rdma_free(&c->a, c);
}

/* ---- a rank >>rank ---- */

struct wsync_rank {
    wsync_allocator a;
    int fd;
    wsync__ctl_sess sess;      /* the connection's MACs */
    uint32_t role, rank;
    int window;                /* inference: its fabric keeps a write window (OPEN, COMMIT) */
    char me[48];
    unsigned timeout_ms;
    wsync_ctl_msg assign;
    wsync_fabric *f;
    wsync_fabric_mr **mrs;
    uint64_t *mr_len;
    uint8_t **mr_addr;         /* where each region is here (for preparation) */
    uint32_t n_regions;
    wsync_fabric_remote **rem; /* per target */
    /* trainers: transfers that gather or quantize go through the executor */
    wsync_exec_task *tasks;    /* one per transfer */
    uint8_t *staging;
    uint64_t staging_len, staging_want;
    wsync_fabric_mr *staging_mr;
    int staging_host;          /* the arena came from wsync_fabric_host_alloc */
    wsync_exec_stats stats;
    uint64_t step;             /* the last GO */
    /* trainers: what a step moves and what it ran (DONE reports both) */
    wsync_ctl_tensor *own;     /* the rank's tensors (names copied) */
    uint32_t n_own;
    uint32_t *by_name;         /* own, sorted by name */
    uint32_t *reads_off, *reads; /* the tensors each transfer reads (wsync__ctl_reads) */
    int subset;                /* wsync_rank_select called this step */
    uint8_t *named;            /* n_own bits: the tensors selected */
    uint8_t *sel;              /* per transfer: 1 when it reads a selected tensor */
    uint8_t *ran;              /* n_transfers bits: written this step */
    uint32_t runs;             /* writes this step (a transfer twice counts twice) */
    wsync_exec_task *run;      /* the selected tasks of a push_some */
    /* inference */
    wsync_result (*on_commit)(void *user, uint64_t step, wsync_error *err);
    void (*on_abort)(void *user, uint64_t step, const char *why);
    void *user;
    pthread_t th;
    int th_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    volatile uint64_t version;
    uint64_t aborted;
    int ended;
    char why[320];
    /* the sparse step, trainers */
    int sp_on;                 /* options.sparse */
    double sp_max;
    uint32_t *sp_stg;          /* per target: its rank's staging target (UINT32_MAX: none) */
    uint64_t *sp_off;          /* per target (staging): its slot's place in sp_buf, and its bytes */
    uint64_t *sp_cap;
    uint8_t *sp_buf;           /* the slots as packed, registered */
    uint64_t sp_buf_len;
    wsync_fabric_mr *sp_mr;
    int sp_buf_host;
    uint8_t *sp_elig;          /* per transfer: may go sparse (to a rank with staging): 1 bf16, 2 fp8, */
                               /* 3 fp8 from the gather inbox */
    uint8_t *sp_skip;          /* per transfer: sent sparse this step (the dense pass skips it) */
    uint64_t *sp_cnt;          /* per transfer: its changes this step */
    uint64_t *sp_tsb, *sp_tdb; /* per target: sparse and dense bytes this step */
    uint8_t *sp_tsp;           /* per target: 1 sparse this step */
    uint8_t **sp_prev;         /* per region: what the last step sent (NULL: nothing eligible reads it) */
    uint64_t **sp_chg;         /* per region: the elements changed this step, ascending */
    uint16_t **sp_val;         /* and their values */
    uint64_t *sp_nchg, *sp_capchg;
    uint32_t *sp_pos;          /* the diff's chunk */
    uint64_t sp_base;          /* the step prev holds, committed as far as this rank knows (0: none) */
    int sp_skipping;           /* a push in progress skips sp_skip's transfers */
    /* fp8 transfers that may go sparse (sp_elig 2 and 3): what was last sent */
    uint8_t *sp_q;             /* each one's e4m3 bytes, then its scales (8-byte aligned) */
    uint64_t *sp_qoff;         /* per transfer: its place in sp_q */
    uint8_t *sp_band;          /* a row of tiles quantized again; from sp_tile_at, one tile */
    uint64_t sp_tile_at;
    uint8_t *sp_tmov;          /* per tile of that row: what changed in it */
    float *sp_tsc;             /* and its scale now */
    uint32_t *sp_fpos, *sp_spos; /* the step's moved fp8 bytes and scales (every fp8 transfer's, */
    uint8_t *sp_fval, *sp_sval;  /* in order; positions from the transfer's first byte or scale) */
    uint64_t sp_fn, sp_fcap, sp_sn, sp_scap;
    uint64_t *sp_foff, *sp_soff, *sp_scnt; /* per transfer: where its own start, its scales' count */
    int sp_qfill;              /* a dense push: the preparation keeps what it quantized in sp_q */
    uint32_t sp_fp8_gathered;  /* fp8 transfers from the gather inbox that cannot go sparse (always dense) */
    /* fp8 transfers from the gather inbox that may go sparse (sp_elig 3): the inbox
       fills in the gather phase, so their sections are packed after the barrier
       before their mesh group, and the slots of the ranks they write to wait */
    uint32_t sp_ib;            /* the inbox entry in own (UINT32_MAX: none) */
    uint32_t sp_fp8_late;      /* how many */
    uint32_t sp_late_last;     /* the last mesh group that has one */
    int sp_late_on;            /* this push is sparse and has them */
    double sp_late_s;          /* this push's time on them before the slots' writes */
    uint8_t *sp_wlate;         /* per target (staging): its slot waits for them */
    wsync_sparse_writer *sp_w; /* per target (staging): the slot being packed */
    uint64_t *sp_ltsb, *sp_ltdb; /* per target: a mesh group's such transfers' sparse and dense bytes */
    uint8_t *sp_ltsp;          /* and 1 sparse, 2 overflow */
    uint64_t *sp_lchg;         /* one transfer's changed elements, ascending (region indices) */
    uint16_t *sp_lval;         /* and their values */
    uint64_t sp_lnchg, sp_lcap;
    wsync_sparse_stats sp_stats;
    /* the sparse step, inference ranks */
    int stg_on;
    uint32_t stg_region;
    uint64_t stg_slot;         /* each trainer's slot */
    uint64_t *stg_lens;        /* the regions' lengths, the staging region's 0 */
    uint32_t *stg_senders, stg_n; /* the last OPEN's writers */
    uint64_t stg_open;         /* its step */
};

static void wsync__rank_end(wsync_rank *r, const char *why)
{
    pthread_mutex_lock(&r->mu);
    if (!r->ended) snprintf(r->why, sizeof r->why, "%.300s", why);
    r->ended = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- the sparse step: an inference rank at COMMIT ---- */

/* Every slot of the step's writers (the OPEN's) validated first, then
   scattered: a refused slot writes nothing at all. */
static wsync_result wsync__rank_stg_commit(wsync_rank *r, uint64_t step, wsync_error *err)
{
    wsync_sparse_expect x;
    wsync_sparse_info info;
    wsync_result res;
    const uint8_t *stg = r->mr_addr[r->stg_region];
    uint64_t changes = 0;
    double t0 = wsync__ctl_now(), t1;
    uint32_t i;
    char why[320];
    if (r->stg_open != step)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s: COMMIT of step %llu without its OPEN", r->me,
                                (unsigned long long)step);
    memset(&x, 0, sizeof x);
    x.step = step;
    x.base = r->version;
    x.n_regions = r->n_regions;
    x.region_len = r->stg_lens;
    for (i = 0; i < r->stg_n; i++) {
        x.sender = r->stg_senders[i];
        if ((res = wsync_sparse_validate(stg + (uint64_t)x.sender * r->stg_slot, r->stg_slot, &x, &info, err)) !=
            WSYNC_OK) {
            snprintf(why, sizeof why, "%.300s", err->message);
            return wsync_error_set(err, res, "%s: refused its %s region %u: %s", r->me, WSYNC_CTL_STAGING,
                                    (unsigned)r->stg_region, why);
        }
        changes += info.changes;
    }
    t1 = wsync__ctl_now();
    for (i = 0; i < r->stg_n; i++)
        wsync_sparse_scatter(stg + (uint64_t)r->stg_senders[i] * r->stg_slot, r->mr_addr);
    pthread_mutex_lock(&r->mu);
    memset(&r->sp_stats, 0, sizeof r->sp_stats);
    r->sp_stats.step = step;
    r->sp_stats.scattered = changes;
    r->sp_stats.validate_s = t1 - t0;
    r->sp_stats.scatter_s = wsync__ctl_now() - t1;
    pthread_mutex_unlock(&r->mu);
    return WSYNC_OK;
}

static wsync_result wsync__rank_sp_init(wsync_rank *r, const wsync_rank_options *o, wsync_error *err);
static void wsync__rank_sp_keep(wsync_rank *r, uint32_t j, const uint8_t *tmp, uint64_t scales_at);
static wsync_result wsync__rank_stg_init(wsync_rank *r, const wsync_rank_options *o, wsync_error *err);

static void *wsync__rank_main(void *p)
{
    wsync_rank *r = (wsync_rank *)p;
    for (;;) {
        wsync_ctl_msg m;
        wsync_error e;
        int closed = 0;
        if (wsync__ctl_recv(r->fd, &r->sess, 10000, 1, &r->a, &m, "the controller", &closed, &e) != WSYNC_OK) {
            wsync__rank_end(r, closed ? "the controller went away (connection closed)" : e.message);
            break;
        }
        if (m.type == WSYNC_CTL_OPEN) { /* a step's writers, until its COMMIT */
            wsync_result res = WSYNC_OK;
            wsync_error_set(&e, WSYNC_OK, NULL);
            if (r->window)
                res = wsync_fabric_window_open(r->f, m.step, m.senders, m.n_senders, &e);
            if (r->stg_on && m.n_senders <= r->assign.n_trainers) { /* the slots COMMIT reads */
                if (m.n_senders) memcpy(r->stg_senders, m.senders, (size_t)m.n_senders * sizeof *m.senders);
                r->stg_n = m.n_senders;
                r->stg_open = m.step;
            }
            if (wsync__ctl_send_text(r->fd, &r->sess, WSYNC_CTL_ACK, m.step, res, res == WSYNC_OK ? "" : e.message,
                                     "the controller", &e) != WSYNC_OK) {
                wsync_ctl_msg_free(&m);
                wsync__rank_end(r, e.message);
                break;
            }
        } else if (m.type == WSYNC_CTL_COMMIT) {
            wsync_result res = WSYNC_OK;
            wsync_error_set(&e, WSYNC_OK, NULL);
            /* every trainer flushed before its DONE: nobody writes now */
            if (r->window) wsync_fabric_window_close(r->f, m.step, NULL);
            if (m.step <= r->version) {
                res = wsync_error_set(&e, WSYNC_ERR_INVALID_ARGUMENT, "COMMIT for step %llu at version %llu",
                                       (unsigned long long)m.step, (unsigned long long)r->version);
            } else {
                if (r->stg_on) res = wsync__rank_stg_commit(r, m.step, &e);
                if (res == WSYNC_OK && r->on_commit) {
                    double t0 = wsync__ctl_now();
                    res = r->on_commit(r->user, m.step, &e);
                    if (res != WSYNC_OK && !e.message[0])
                        snprintf(e.message, sizeof e.message, "%s", wsync_result_str(res));
                    pthread_mutex_lock(&r->mu);
                    r->sp_stats.commit_s = wsync__ctl_now() - t0;
                    pthread_mutex_unlock(&r->mu);
                }
            }
            if (res == WSYNC_OK) {
                pthread_mutex_lock(&r->mu);
                __atomic_store_n(&r->version, m.step, __ATOMIC_RELEASE);
                pthread_cond_broadcast(&r->cv);
                pthread_mutex_unlock(&r->mu);
            }
            if (wsync__ctl_send_text(r->fd, &r->sess, WSYNC_CTL_ACK, m.step, res, res == WSYNC_OK ? "" : e.message,
                                     "the controller", &e) != WSYNC_OK) {
                wsync__rank_end(r, e.message);
                break;
            }
        } else if (m.type == WSYNC_CTL_ABORT) {
            if (r->on_abort) r->on_abort(r->user, m.step, m.text);
            pthread_mutex_lock(&r->mu);
            if (m.step > r->aborted) r->aborted = m.step;
            snprintf(r->why, sizeof r->why, "step %llu aborted: %s", (unsigned long long)m.step, m.text);
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        } else {
            char why[320];
            if (m.type == WSYNC_CTL_BYE) snprintf(why, sizeof why, "%s", "the controller said BYE");
            else if (m.type == WSYNC_CTL_ERROR) snprintf(why, sizeof why, "the controller: %s", m.text);
            else snprintf(why, sizeof why, "unexpected %s from the controller", wsync__ctl_type_name(m.type));
            wsync_ctl_msg_free(&m);
            wsync__rank_end(r, why);
            break;
        }
        wsync_ctl_msg_free(&m);
    }
    return NULL;
}

static wsync_result wsync__rank_check(const wsync_rank_options *o, wsync_error *err)
{
    uint32_t i;
    if (!o->port) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: the controller's port");
    if (o->role != WSYNC_CTL_TRAINER && o->role != WSYNC_CTL_INFERENCE)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "rank: role %u", (unsigned)o->role);
    if (o->n_regions && (!o->mrs || !o->descs))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: regions without mrs or descriptors");
    if (o->n_tensors && !o->tensors)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: tensors is NULL");
    if (o->role == WSYNC_CTL_TRAINER && !o->fabric)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: a trainer needs a fabric");
    for (i = 0; i < o->n_regions; i++)
        if (!o->mrs[i]) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "rank: region %u not registered", i);
    return WSYNC_OK;
}

/* Staging bytes a transfer needs: its prepared rows (8-byte multiples, so
   every task's place in the ring stays aligned), and fp8 scales after them. */
static uint64_t wsync__rank_tmp(const wsync_ctl_transfer *x, uint64_t *scales_at)
{
    uint64_t data = (x->len + 7) & ~(uint64_t)7, ns;
    *scales_at = data;
    if (x->prep == WSYNC_CTL_PREP_FP8) {
        ns = wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block);
        return data + ((ns * 4 + 7) & ~(uint64_t)7);
    }
    return x->rows > 1 ? data : 0;
}

/* The staging arena: on one host from wsync_fabric_host_alloc (shareable),
   so that a fabric that also receives in SHM mode (a trainer's gather
   inbox) can register it; elsewhere from the allocator. */
static uint8_t *wsync__rank_staging_alloc(wsync_rank *r)
{
    void *p = NULL;
    wsync_error e;
    if (r->f->backend != WSYNC_FABRIC_HOST) return (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)r->staging_len);
    if (wsync_fabric_host_alloc(r->f, r->staging_len, &p, &e) != WSYNC_OK) return NULL;
    r->staging_host = 1;
    return (uint8_t *)p;
}

/* The executor's tasks, and a staging arena registered on the fabric when
   any transfer gathers or quantizes. */
static wsync_result wsync__rank_staging(wsync_rank *r, wsync_error *err)
{
    uint32_t i, n = r->assign.n_transfers;
    uint64_t most = 0, at;
    wsync_fabric_desc d;
    if (n && !(r->tasks = (wsync_exec_task *)wsync__rdma_alloc(&r->a, (size_t)n * sizeof *r->tasks)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank: tasks");
    for (i = 0; i < n; i++) {
        r->tasks[i].tmp_bytes = wsync__rank_tmp(&r->assign.transfers[i], &at);
        r->tasks[i].user = &r->assign.transfers[i];
        r->tasks[i].start_s = r->assign.transfers[i].start_us * 1e-6;
        if (r->tasks[i].tmp_bytes > most) most = r->tasks[i].tmp_bytes;
    }
    if (most == 0) return WSYNC_OK;
    r->staging_len = r->staging_want > most ? r->staging_want : most;
    if ((uint64_t)(size_t)r->staging_len != r->staging_len ||
        !(r->staging = wsync__rank_staging_alloc(r)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: %llu staging bytes", r->me,
                                (unsigned long long)r->staging_len);
    return r->f->reg(r->f->user, r->staging, r->staging_len, WSYNC_MEM_HOST, &r->staging_mr, &d, err);
}

/* A trainer checks its ASSIGN against its own regions, then opens every
   target on its fabric. */
static wsync_result wsync__rank_targets(wsync_rank *r, wsync_error *err)
{
    uint32_t i;
    wsync_result res;
    for (i = 0; i < r->assign.n_transfers; i++) {
        const wsync_ctl_transfer *x = &r->assign.transfers[i];
        uint64_t ext = wsync__ctl_extent(x);
        if (x->src_region >= r->n_regions || !wsync__rdma_in(x->src_offset, ext, r->mr_len[x->src_region]))
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                    "%s: ASSIGN transfer %u reads %llu bytes at %llu of region %u, outside this rank's regions",
                                    r->me, (unsigned)i, (unsigned long long)ext, (unsigned long long)x->src_offset,
                                    (unsigned)x->src_region);
        if (x->prep == WSYNC_CTL_PREP_FP8 && ((uintptr_t)(r->mr_addr[x->src_region] + x->src_offset) % 2 ||
                                              (x->rows > 1 && x->src_stride % 2)))
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                    "%s: ASSIGN transfer %u: bf16 rows not 2-byte aligned", r->me, (unsigned)i);
    }
    if ((res = wsync__rank_staging(r, err)) != WSYNC_OK) return res;
    if (r->assign.n_targets &&
        !(r->rem = (wsync_fabric_remote **)wsync__rdma_alloc(&r->a, r->assign.n_targets * sizeof *r->rem)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank: remotes");
    for (i = 0; i < r->assign.n_targets; i++) {
        const wsync_ctl_target *g = &r->assign.targets[i];
        if ((res = r->f->open_remote(r->f->user, &g->desc, &r->rem[i], err)) != WSYNC_OK) {
            char why[320];
            snprintf(why, sizeof why, "%.250s", err ? err->message : "");
            if (g->rank >= r->assign.n_inference)
                return wsync_error_set(err, res, "%s: opening trainer rank %u's gather inbox: %s", r->me,
                                        (unsigned)(g->rank - r->assign.n_inference), why);
            return wsync_error_set(err, res, "%s: opening inference rank %u region %u%s: %s", r->me, (unsigned)g->rank,
                                    (unsigned)(g->region & ~WSYNC_CTL_TARGET_STAGING),
                                    g->region & WSYNC_CTL_TARGET_STAGING ? " (its staging)" : "", why);
        }
    }
    return WSYNC_OK;
}

static int wsync__rank_name_lt(const void *ctx, uint32_t a, uint32_t b)
{
    const wsync_ctl_tensor *t = (const wsync_ctl_tensor *)ctx;
    return strcmp(t[a].name, t[b].name) < 0;
}

/* A trainer's copy of its tensors (for wsync_rank_select), the tensors each
   transfer reads, and the step's bits. */
static wsync_result wsync__rank_own(wsync_rank *r, const wsync_rank_options *o, wsync_error *err)
{
    uint32_t i, nx = r->assign.n_transfers;
    size_t names = 0, at;
    wsync_result res;
    for (i = 0; i < o->n_tensors; i++) names += strlen(o->tensors[i].name) + 1;
    at = ((size_t)o->n_tensors + 1) * sizeof *r->own;
    r->n_own = o->n_tensors;
    r->own = (wsync_ctl_tensor *)wsync__rdma_alloc(&r->a, at + names);
    r->by_name = (uint32_t *)wsync__rdma_alloc(&r->a, ((size_t)r->n_own + 1) * sizeof *r->by_name);
    r->named = (uint8_t *)wsync__rdma_alloc(&r->a, ((size_t)r->n_own + 7) / 8 + 1);
    r->sel = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)nx + 1);
    r->ran = (uint8_t *)wsync__rdma_alloc(&r->a, ((size_t)nx + 7) / 8 + 1);
    r->run = (wsync_exec_task *)wsync__rdma_alloc(&r->a, ((size_t)nx + 1) * sizeof *r->run);
    if (!r->own || !r->by_name || !r->named || !r->sel || !r->ran || !r->run)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: its tensors", r->me);
    memset(r->ran, 0, ((size_t)nx + 7) / 8 + 1);
    for (i = 0; i < r->n_own; i++) {
        char *name = (char *)r->own + at;
        size_t k = strlen(o->tensors[i].name) + 1;
        r->own[i] = o->tensors[i];
        memcpy(name, o->tensors[i].name, k);
        r->own[i].name = name;
        at += k;
        r->by_name[i] = i;
    }
    if ((res = wsync__ctl_reads(&r->a, r->own, r->n_own, r->assign.transfers, nx, &r->reads_off, &r->reads, err)) !=
            WSYNC_OK ||
        (res = wsync__ctl_reads_inbox(&r->a, r->own, r->n_own, r->assign.transfers, nx, r->assign.targets,
                                      r->assign.n_inference + r->assign.rank, &r->reads_off, &r->reads, err)) !=
            WSYNC_OK)
        return res;
    wsync__ctl_sort(r->by_name, r->n_own, wsync__rank_name_lt, r->own);
    return WSYNC_OK;
}

/* The handshake: HELLO, the controller's CHALLENGE proves the job key
   (else nothing more is sent), PROOF; then the session's MACs. */
static wsync_result wsync__rank_handshake(wsync_rank *r, const wsync_job_key *key, const char *host, unsigned port,
                                          wsync_error *err)
{
    wsync_ctl_msg h, m;
    wsync_ctl_auth au;
    wsync_result res;
    int closed = 0;
    memset(&h, 0, sizeof h);
    h.type = WSYNC_CTL_HELLO;
    h.role = r->role;
    h.rank = r->rank;
    if (wsync_random_bytes(h.nonce, sizeof h.nonce) != WSYNC_OK)
        return wsync_error_set(err, WSYNC_ERR_IO, "%s: no random source for the handshake's nonce", r->me);
    if ((res = wsync__ctl_send(r->fd, NULL, &h, &r->a, "the controller", err)) != WSYNC_OK ||
        (res = wsync__ctl_recv(r->fd, NULL, (int)r->timeout_ms, 0, &r->a, &m, "the controller", &closed, err)) !=
            WSYNC_OK)
        return res;
    if (m.type != WSYNC_CTL_CHALLENGE) {
        wsync_error_set(err, WSYNC_ERR_AUTH, "%s: the controller at %s port %u answered HELLO with %s, not CHALLENGE",
                         r->me, host, port, wsync__ctl_type_name(m.type));
        wsync_ctl_msg_free(&m);
        return WSYNC_ERR_AUTH;
    }
    wsync_ctl_auth_derive(key, r->role, r->rank, h.nonce, m.nonce, &au);
    if (!wsync_ct_equal(m.mac, au.ctl_proof, WSYNC_CTL_MAC)) {
        memset(&au, 0, sizeof au);
        return wsync_error_set(err, WSYNC_ERR_AUTH,
                                "%s: the controller at %s port %u did not prove the job key (it has another one, or "
                                "none; or it is not this job's controller): refused, nothing sent to it%s",
                                r->me, host, port,
                                key->len ? ""
                                         : "; this rank has no key: give it the job's (job_key, WSYNC_JOB_KEY or "
                                           "WSYNC_JOB_KEY_FILE)");
    }
    memset(&h, 0, sizeof h);
    h.type = WSYNC_CTL_PROOF;
    memcpy(h.mac, au.rank_proof, WSYNC_CTL_MAC);
    res = wsync__ctl_send(r->fd, NULL, &h, &r->a, "the controller", err);
    wsync__ctl_sess_start(&r->sess, &au, 0);
    memset(&au, 0, sizeof au);
    return res;
}

WSYNC_DEF wsync_result wsync_rank_join(const wsync_rank_options *opt, wsync_rank **out, wsync_error *err)
{
    wsync_rank *r;
    wsync_job_key key;
    wsync_ctl_msg j, m;
    wsync_error local;
    wsync_result res;
    char why[256];
    uint32_t i;
    int closed = 0;
    if (!err) err = &local;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (out) *out = NULL;
    if (!opt || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "rank: options and out");
    if ((res = wsync__rank_check(opt, err)) != WSYNC_OK) return res;
    if ((res = wsync_job_key_resolve(opt->job_key, opt->job_key_len, &key, err)) != WSYNC_OK) {
        snprintf(why, sizeof why, "%.200s", err->message);
        return wsync_error_set(err, res, "rank: %s", why);
    }
    r = (wsync_rank *)wsync__rdma_alloc(&opt->allocator, sizeof *r);
    if (!r) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank");
    r->a = opt->allocator;
    r->fd = -1;
    r->role = opt->role;
    r->rank = opt->rank;
    r->f = opt->fabric;
    r->timeout_ms = opt->timeout_ms ? opt->timeout_ms : 30000;
    r->staging_want = opt->staging_bytes ? opt->staging_bytes : (64ull << 20);
    r->on_commit = opt->on_commit;
    r->on_abort = opt->on_abort;
    r->user = opt->user;
    snprintf(r->me, sizeof r->me, "%s rank %u", r->role == WSYNC_CTL_TRAINER ? "trainer" : "inference",
             (unsigned)r->rank);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->n_regions = opt->n_regions;
    if (r->n_regions) {
        r->mrs = (wsync_fabric_mr **)wsync__rdma_alloc(&r->a, r->n_regions * sizeof *r->mrs);
        r->mr_len = (uint64_t *)wsync__rdma_alloc(&r->a, r->n_regions * sizeof *r->mr_len);
        r->mr_addr = (uint8_t **)wsync__rdma_alloc(&r->a, r->n_regions * sizeof *r->mr_addr);
        if (!r->mrs || !r->mr_len || !r->mr_addr) {
            wsync_rank_close(r);
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank: regions");
        }
        for (i = 0; i < r->n_regions; i++) {
            r->mrs[i] = opt->mrs[i];
            r->mr_len[i] = opt->descs[i].len;
            r->mr_addr[i] = (uint8_t *)(uintptr_t)opt->descs[i].addr;
        }
    }
    r->fd = wsync__tcp_connect(opt->host ? opt->host : "127.0.0.1", opt->port, r->timeout_ms, why, sizeof why);
    if (r->fd < 0) {
        wsync_rank_close(r);
        return wsync_error_set(err, WSYNC_ERR_IO, "%s: the controller at %s port %u: %s", r->me,
                                opt->host ? opt->host : "127.0.0.1", opt->port, why);
    }
    wsync__ctl_nodelay(r->fd);
    wsync__rdma_set_timeouts(r->fd, r->timeout_ms);
    res = wsync__rank_handshake(r, &key, opt->host ? opt->host : "127.0.0.1", opt->port, err);
    memset(&key, 0, sizeof key);
    if (res == WSYNC_OK && r->role == WSYNC_CTL_INFERENCE && r->f) { /* closed until the first OPEN */
        wsync_error we;
        r->window = wsync_fabric_window_close(r->f, 0, &we) == WSYNC_OK; /* one-host, verbs: unsupported */
    }
    if (res != WSYNC_OK) {
        wsync_rank_close(r);
        return res;
    }
    memset(&j, 0, sizeof j);
    j.type = WSYNC_CTL_JOIN;
    j.role = r->role;
    j.rank = r->rank;
    j.n_regions = opt->n_regions;
    j.regions = (wsync_fabric_desc *)opt->descs;
    j.n_tensors = opt->n_tensors;
    j.tensors = (wsync_ctl_tensor *)opt->tensors;
    if ((res = wsync__ctl_send(r->fd, &r->sess, &j, &r->a, "the controller", err)) != WSYNC_OK ||
        (res = wsync__ctl_recv(r->fd, &r->sess, (int)r->timeout_ms, 0, &r->a, &m, "the controller", &closed, err)) !=
            WSYNC_OK) {
        wsync_rank_close(r);
        return res;
    }
    if (m.type != WSYNC_CTL_ASSIGN || m.role != r->role || m.rank != r->rank) {
        res = m.type == WSYNC_CTL_ERROR && m.status && m.status < 256 ? (wsync_result)m.status : WSYNC_ERR_IO;
        if (m.type == WSYNC_CTL_ERROR) wsync_error_set(err, res, "%s: the controller refused: %s", r->me, m.text);
        else wsync_error_set(err, res, "%s: expected ASSIGN, got %s", r->me, wsync__ctl_type_name(m.type));
        wsync_ctl_msg_free(&m);
        wsync_rank_close(r);
        return res;
    }
    r->assign = m;
    if (r->role == WSYNC_CTL_TRAINER) {
        if ((res = wsync__rank_targets(r, err)) != WSYNC_OK || (res = wsync__rank_own(r, opt, err)) != WSYNC_OK ||
            (res = wsync__rank_sp_init(r, opt, err)) != WSYNC_OK) {
            wsync_rank_close(r);
            return res;
        }
    } else {
        if ((res = wsync__rank_stg_init(r, opt, err)) != WSYNC_OK) {
            wsync_rank_close(r);
            return res;
        }
        if (pthread_create(&r->th, NULL, wsync__rank_main, r) != 0) {
            wsync_rank_close(r);
            return wsync_error_set(err, WSYNC_ERR_IO, "%s", "rank: pthread_create");
        }
        r->th_on = 1;
    }
    *out = r;
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_rank_wait_go(wsync_rank *r, uint64_t *step, int *bye, int timeout_ms, wsync_error *err)
{
    wsync_ctl_msg m;
    int closed = 0;
    wsync_result res;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!r || !step || !bye || r->role != WSYNC_CTL_TRAINER)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "wait_go: a trainer's rank");
    *bye = 0;
    for (;;) {
        if ((res = wsync__ctl_recv(r->fd, &r->sess, timeout_ms < 0 ? 10000 : timeout_ms, timeout_ms < 0, &r->a, &m,
                                   "the controller", &closed, err)) != WSYNC_OK)
            return res;
        if (m.type != WSYNC_CTL_ABORT) break;
        wsync_ctl_msg_free(&m); /* a step this trainer already answered was aborted */
        r->sp_base = 0;         /* what it sent is not what the receivers hold: the next step dense */
    }
    res = WSYNC_OK;
    if (m.type == WSYNC_CTL_GO) { /* a new step: everything, nothing run yet */
        *step = r->step = m.step;
        r->subset = 0;
        r->runs = 0;
        if (r->assign.n_transfers) memset(r->ran, 0, ((size_t)r->assign.n_transfers + 7) / 8);
    }
    else if (m.type == WSYNC_CTL_BYE) *bye = 1;
    else if (m.type == WSYNC_CTL_ERROR) res = wsync_error_set(err, WSYNC_ERR_IO, "the controller: %s", m.text);
    else res = wsync_error_set(err, WSYNC_ERR_IO, "unexpected %s from the controller", wsync__ctl_type_name(m.type));
    wsync_ctl_msg_free(&m);
    return res;
}

static wsync_result wsync__rank_wfail(wsync_rank *r, const wsync_ctl_transfer *x, wsync_result res, wsync_error *err)
{
    char why[320];
    uint32_t to = r->assign.targets[x->target].rank, ni = r->assign.n_inference;
    snprintf(why, sizeof why, "%.250s", err->message);
    return wsync_error_set(err, res, "%s: writing %llu bytes to %s rank %u%s: %s", r->me, (unsigned long long)x->len,
                            to >= ni ? "trainer" : "inference", (unsigned)(to >= ni ? to - ni : to),
                            to >= ni ? " (the gather of fp8 tiles)" : "", why);
}

/* Executor stage: gather a strided slice, or quantize it to fp8, into staging. */
static wsync_result wsync__rank_prepare(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t tmp_off,
                                        wsync_error *err)
{
    wsync_rank *r = (wsync_rank *)user;
    const wsync_ctl_transfer *x = (const wsync_ctl_transfer *)t->user;
    const uint8_t *src = r->mr_addr[x->src_region] + x->src_offset;
    uint64_t row = x->len / x->rows, i, scales_at;
    (void)tmp_off;
    if (!t->tmp_bytes) return WSYNC_OK; /* written straight from the source */
    if (x->prep == WSYNC_CTL_PREP_FP8) {
        uint32_t j = (uint32_t)(x - r->assign.transfers);
        wsync_result res;
        wsync__rank_tmp(x, &scales_at);
        res = wsync_quantize_e4m3((const uint16_t *)(const void *)src, x->rows, row,
                                  x->rows > 1 ? x->src_stride / 2 : row, x->block, tmp,
                                  (float *)(void *)(tmp + scales_at), err);
        if (res == WSYNC_OK && r->sp_qfill && r->sp_elig[j] >= 2) wsync__rank_sp_keep(r, j, tmp, scales_at);
        return res;
    }
    for (i = 0; i < x->rows; i++) memcpy(tmp + i * row, src + i * x->src_stride, (size_t)row);
    return WSYNC_OK;
}

/* The log DONE reports: transfer x was written (the write stage is one
   thread, and push_some returns after it). */
static wsync_result wsync__rank_ran(wsync_rank *r, const wsync_ctl_transfer *x)
{
    uint32_t j = (uint32_t)(x - r->assign.transfers);
    r->ran[j / 8] |= (uint8_t)(1u << (j % 8));
    r->runs++;
    return WSYNC_OK;
}

/* Executor stage: the one-sided writes (fp8: the codes, then the scales). */
static wsync_result wsync__rank_write(void *user, const wsync_exec_task *t, uint8_t *tmp, uint64_t tmp_off,
                                      wsync_error *err)
{
    wsync_rank *r = (wsync_rank *)user;
    const wsync_ctl_transfer *x = (const wsync_ctl_transfer *)t->user;
    wsync_fabric_remote *dst = r->rem[x->target];
    wsync_result res;
    uint64_t scales_at;
    (void)tmp;
    if (!t->tmp_bytes) {
        res = r->f->write(r->f->user, r->mrs[x->src_region], x->src_offset, dst, x->dst_offset, x->len, err);
        return res == WSYNC_OK ? wsync__rank_ran(r, x) : wsync__rank_wfail(r, x, res, err);
    }
    wsync__rank_tmp(x, &scales_at);
    res = r->f->write(r->f->user, r->staging_mr, tmp_off, dst, x->dst_offset, x->len, err);
    if (res == WSYNC_OK && x->prep == WSYNC_CTL_PREP_FP8)
        res = r->f->write(r->f->user, r->staging_mr, tmp_off + scales_at, dst, x->scale_offset,
                          4 * wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block), err);
    /* the staging bytes are reused once this returns: a backend that reads
       them later (RDMA) must be done with them first */
    if (res == WSYNC_OK && r->f->backend == WSYNC_FABRIC_VERBS) res = r->f->flush(r->f->user, err);
    return res == WSYNC_OK ? wsync__rank_ran(r, x) : wsync__rank_wfail(r, x, res, err);
}

WSYNC_DEF wsync_result wsync_rank_push_some(wsync_rank *r, uint32_t first, uint32_t count, int flush,
                                            wsync_error *err)
{
    wsync_exec_options eo;
    wsync_result res;
    wsync_error local;
    char why[320];
    if (!err) err = &local;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!r || r->role != WSYNC_CTL_TRAINER)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "push: a trainer's rank");
    if (first > r->assign.n_transfers || count > r->assign.n_transfers - first)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "push: transfers %u + %u of %u", (unsigned)first,
                                (unsigned)count, (unsigned)r->assign.n_transfers);
    memset(&eo, 0, sizeof eo);
    eo.allocator = r->a;
    eo.staging = r->staging;
    eo.staging_len = r->staging_len;
    eo.n_stages = 2;
    eo.stages[0] = wsync__rank_prepare;
    eo.stages[1] = wsync__rank_write;
    eo.stage_names[0] = "prepare";
    eo.stage_names[1] = "write";
    eo.user = r;
    if (r->subset || r->sp_skipping) { /* the selected transfers of the range (not sent in a slot), in order */
        uint32_t j, k = 0;
        for (j = first; j < first + count; j++)
            if ((!r->subset || r->sel[j]) && !(r->sp_skipping && r->sp_skip[j])) {
                r->run[k] = r->tasks[j];
                if (r->subset) r->run[k].start_s = 0; /* the plan's times are for the whole plan: unpaced */
                k++;
            }
        if (k && (res = wsync_exec_run(&eo, r->run, k, &r->stats, err)) != WSYNC_OK) return res;
    } else if (count && (res = wsync_exec_run(&eo, r->tasks + first, count, &r->stats, err)) != WSYNC_OK)
        return res;
    if (flush && (res = r->f->flush(r->f->user, err)) != WSYNC_OK) {
        snprintf(why, sizeof why, "%.250s", err->message);
        return wsync_error_set(err, res, "%s: %s", r->me, why);
    }
    return WSYNC_OK;
}

WSYNC_DEF void wsync_rank_push_stats(const wsync_rank *r, wsync_exec_stats *out)
{
    if (!out) return;
    if (r) *out = r->stats;
    else memset(out, 0, sizeof *out);
}

/* Between mesh groups: everything written so far visible, BARRIER, then
   the controller's RELEASE for this group (nothing else may come first). */
static wsync_result wsync__rank_barrier(wsync_rank *r, uint32_t g, wsync_error *err)
{
    wsync_ctl_msg m;
    wsync_result res;
    int closed = 0;
    char why[320];
    if ((res = r->f->flush(r->f->user, err)) != WSYNC_OK) {
        snprintf(why, sizeof why, "%.250s", err->message);
        return wsync_error_set(err, res, "%s: %s", r->me, why);
    }
    memset(&m, 0, sizeof m);
    m.type = WSYNC_CTL_BARRIER;
    m.step = r->step;
    m.group = g;
    if ((res = wsync__ctl_send(r->fd, &r->sess, &m, &r->a, "the controller", err)) != WSYNC_OK) return res;
    if ((res = wsync__ctl_recv(r->fd, &r->sess, (int)r->timeout_ms, 0, &r->a, &m, "the controller", &closed, err)) !=
        WSYNC_OK)
        return res;
    if (m.type == WSYNC_CTL_ABORT)
        res = wsync_error_set(err, WSYNC_ERR_IO, "%s: step %llu aborted at mesh group %u's barrier: %s", r->me,
                               (unsigned long long)m.step, (unsigned)g, m.text);
    else if (m.type != WSYNC_CTL_RELEASE || m.step != r->step || m.group != g)
        res = wsync_error_set(err, WSYNC_ERR_IO,
                               "%s: waiting for the release of mesh group %u of step %llu, got %s%s%s", r->me,
                               (unsigned)g, (unsigned long long)r->step, wsync__ctl_type_name(m.type),
                               m.text[0] ? ": " : "", m.text);
    wsync_ctl_msg_free(&m);
    return res;
}

/* The rank's tensor of that name, or -1 (by_name is sorted by name). */
static int64_t wsync__rank_find(const wsync_rank *r, const char *name)
{
    uint32_t l = 0, h = r->n_own;
    while (l < h) {
        uint32_t mid = l + (h - l) / 2;
        int c = strcmp(r->own[r->by_name[mid]].name, name);
        if (c == 0) return r->by_name[mid];
        if (c < 0) l = mid + 1;
        else h = mid;
    }
    return -1;
}

WSYNC_DEF wsync_result wsync_rank_select(wsync_rank *r, const char *const *names, uint32_t n, wsync_error *err)
{
    uint32_t i, j, k;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!r || r->role != WSYNC_CTL_TRAINER || (n && !names))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "select: a trainer's rank and names");
    for (i = 0; i < n; i++)
        if (!names[i] || wsync__rank_find(r, names[i]) < 0)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                    "%s: step %llu: tensor '%.100s' is not one of this rank's tensors: the step "
                                    "cannot move it",
                                    r->me, (unsigned long long)r->step, names[i] ? names[i] : "(null)");
    memset(r->named, 0, ((size_t)r->n_own + 7) / 8);
    for (i = 0; i < n; i++) {
        uint32_t e = (uint32_t)wsync__rank_find(r, names[i]);
        r->named[e / 8] |= (uint8_t)(1u << (e % 8));
    }
    for (j = 0; j < r->assign.n_transfers; j++) {
        r->sel[j] = 0;
        for (k = r->reads_off[j]; k < r->reads_off[j + 1] && !r->sel[j]; k++)
            r->sel[j] = (uint8_t)wsync__ctl_bit(r->named, r->reads[k]);
    }
    r->subset = 1;
    return WSYNC_OK;
}

/* ---- the sparse step: a trainer ---- */

#define WSYNC__SP_CHUNK (1u << 15) /* elements the diff takes at a time: both sides stay in cache for the copy */

/* Whether transfer x reads this trainer's gather inbox (fp8 tiles whose
   rows other trainers hold: in place only after the gather's barrier
   before x's mesh group): 2 when it reads only bytes of the inbox the
   controller uses (the first entry of the name, r->sp_ib), 1 when it reads
   any other inbox bytes, 0 when none. */
static int wsync__rank_sp_inbox(const wsync_rank *r, const wsync_ctl_transfer *x)
{
    uint32_t e;
    int in = 0;
    for (e = 0; e < r->n_own; e++) {
        const wsync_ctl_tensor *t = &r->own[e];
        if (strcmp(t->name, WSYNC_CTL_INBOX) == 0 && t->region == x->src_region &&
            x->src_offset < t->offset + t->row_count && t->offset < x->src_offset + wsync__ctl_extent(x)) {
            if (e == r->sp_ib && x->src_offset >= t->offset &&
                x->src_offset + wsync__ctl_extent(x) <= t->offset + t->row_count)
                return 2;
            in = 1;
        }
    }
    return in;
}

/* The fp8 transfers that may go sparse (sp_elig 2 and 3): the copy of the
   e4m3 bytes and scales each last sent, a row of tiles' scratch and one
   tile's, and the lists of what moved (1/32 of the bytes to start with;
   they grow). */
static wsync_result wsync__rank_sp_fp8_init(wsync_rank *r, wsync_error *err)
{
    uint32_t nx = r->assign.n_transfers, j;
    uint64_t total = 0, band = 0, one = 0, tiles = 0, cap;
    for (j = 0; j < nx; j++) {
        const wsync_ctl_transfer *x = &r->assign.transfers[j];
        uint64_t cols, br, tc;
        if (r->sp_elig[j] < 2) continue;
        cols = x->len / x->rows;
        br = x->block && x->block < x->rows ? x->block : x->rows;
        tc = wsync_quantize_scale_count(1, cols, x->block);
        if (wsync__sp_pad8(br * cols) > band) band = wsync__sp_pad8(br * cols);
        if (br * (x->block && x->block < cols ? x->block : cols) > one)
            one = br * (x->block && x->block < cols ? x->block : cols);
        if (tc > tiles) tiles = tc;
        total += wsync__sp_pad8(x->len) + wsync__sp_pad8(4 * wsync_quantize_scale_count(x->rows, cols, x->block));
    }
    if (total == 0) return WSYNC_OK;
    cap = total / 32 > 65536 ? total / 32 : 65536;
    r->sp_qoff = (uint64_t *)wsync__rdma_alloc(&r->a, ((size_t)nx + 1) * sizeof *r->sp_qoff);
    r->sp_foff = (uint64_t *)wsync__rdma_alloc(&r->a, ((size_t)nx + 1) * sizeof *r->sp_foff);
    r->sp_soff = (uint64_t *)wsync__rdma_alloc(&r->a, ((size_t)nx + 1) * sizeof *r->sp_soff);
    r->sp_scnt = (uint64_t *)wsync__rdma_alloc(&r->a, ((size_t)nx + 1) * sizeof *r->sp_scnt);
    r->sp_tmov = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)tiles);
    r->sp_tsc = (float *)wsync__rdma_alloc(&r->a, (size_t)tiles * sizeof *r->sp_tsc);
    r->sp_tile_at = band;
    if ((uint64_t)(size_t)total != total || (uint64_t)(size_t)(band + one) != band + one || !r->sp_qoff ||
        !r->sp_foff || !r->sp_soff || !r->sp_scnt || !r->sp_tmov || !r->sp_tsc ||
        !(r->sp_q = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)total)) ||
        !(r->sp_band = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)(band + one))) ||
        !(r->sp_fpos = (uint32_t *)wsync__rdma_alloc(&r->a, (size_t)cap * 4)) ||
        !(r->sp_fval = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)cap)) ||
        !(r->sp_spos = (uint32_t *)wsync__rdma_alloc(&r->a, 4096 * 4)) ||
        !(r->sp_sval = (uint8_t *)wsync__rdma_alloc(&r->a, 4096 * 4)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: a copy of the fp8 bytes sent (%llu bytes) for sparse steps",
                                r->me, (unsigned long long)total);
    r->sp_fcap = cap;
    r->sp_scap = 4096;
    for (j = 0, total = 0; j < nx; j++) {
        const wsync_ctl_transfer *x = &r->assign.transfers[j];
        if (r->sp_elig[j] < 2) continue;
        r->sp_qoff[j] = total;
        total += wsync__sp_pad8(x->len) +
                 wsync__sp_pad8(4 * wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block));
    }
    return WSYNC_OK;
}

/* At join: which transfers may go sparse (bf16 rows, 2-byte aligned, or
   fp8, to an inference rank with a staging target: 1 bf16, 2 fp8, 3 fp8
   quantized from the gather inbox), the slots' place in the packing buffer
   (registered), and the copy of what was sent, per region (bf16; the
   inbox's too) or transfer (fp8). An inference rank: its staging entry,
   the slot size. */
static wsync_result wsync__rank_sp_init(wsync_rank *r, const wsync_rank_options *o, wsync_error *err)
{
    uint32_t nt = r->assign.n_targets, nx = r->assign.n_transfers, g, h, j;
    uint64_t at = 0;
    wsync_fabric_desc d;
    wsync_result res;
    r->sp_on = o->sparse;
    r->sp_max = o->sparse_max > 0 ? o->sparse_max : WSYNC_SPARSE_MAX_DEFAULT;
    for (g = 0; g < nt && !(r->assign.targets[g].region & WSYNC_CTL_TARGET_STAGING); g++) {
    }
    if (g == nt) return WSYNC_OK; /* no receiver has staging */
    r->sp_stg = (uint32_t *)wsync__rdma_alloc(&r->a, (size_t)nt * sizeof *r->sp_stg);
    r->sp_off = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)nt * sizeof *r->sp_off);
    r->sp_cap = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)nt * sizeof *r->sp_cap);
    r->sp_tsb = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)nt * sizeof *r->sp_tsb);
    r->sp_tdb = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)nt * sizeof *r->sp_tdb);
    r->sp_tsp = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)nt);
    r->sp_elig = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)nx + 1);
    r->sp_skip = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)nx + 1);
    r->sp_cnt = (uint64_t *)wsync__rdma_alloc(&r->a, ((size_t)nx + 1) * sizeof *r->sp_cnt);
    r->sp_prev = (uint8_t **)wsync__rdma_alloc(&r->a, (size_t)r->n_regions * sizeof *r->sp_prev);
    r->sp_chg = (uint64_t **)wsync__rdma_alloc(&r->a, (size_t)r->n_regions * sizeof *r->sp_chg);
    r->sp_val = (uint16_t **)wsync__rdma_alloc(&r->a, (size_t)r->n_regions * sizeof *r->sp_val);
    r->sp_nchg = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)r->n_regions * sizeof *r->sp_nchg);
    r->sp_capchg = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)r->n_regions * sizeof *r->sp_capchg);
    r->sp_wlate = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)nt);
    r->sp_w = (wsync_sparse_writer *)wsync__rdma_alloc(&r->a, (size_t)nt * sizeof *r->sp_w);
    r->sp_ltsb = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)nt * sizeof *r->sp_ltsb);
    r->sp_ltdb = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)nt * sizeof *r->sp_ltdb);
    r->sp_ltsp = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)nt);
    if (!r->sp_stg || !r->sp_off || !r->sp_cap || !r->sp_tsb || !r->sp_tdb || !r->sp_tsp || !r->sp_elig ||
        !r->sp_skip || !r->sp_cnt || !r->sp_prev || !r->sp_chg || !r->sp_val || !r->sp_nchg || !r->sp_capchg ||
        !r->sp_wlate || !r->sp_w || !r->sp_ltsb || !r->sp_ltdb || !r->sp_ltsp)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: the sparse step's tables", r->me);
    memset(r->sp_wlate, 0, (size_t)nt);
    r->sp_late_last = 0;
    for (r->sp_ib = 0; r->sp_ib < r->n_own && strcmp(r->own[r->sp_ib].name, WSYNC_CTL_INBOX) != 0; r->sp_ib++) {
    }
    if (r->sp_ib == r->n_own) r->sp_ib = UINT32_MAX;
    memset(r->sp_prev, 0, (size_t)r->n_regions * sizeof *r->sp_prev);
    memset(r->sp_chg, 0, (size_t)r->n_regions * sizeof *r->sp_chg);
    memset(r->sp_val, 0, (size_t)r->n_regions * sizeof *r->sp_val);
    memset(r->sp_capchg, 0, (size_t)r->n_regions * sizeof *r->sp_capchg);
    memset(r->sp_skip, 0, (size_t)nx + 1);
    for (g = 0; g < nt; g++) {
        const wsync_ctl_target *t = &r->assign.targets[g];
        r->sp_stg[g] = UINT32_MAX;
        r->sp_off[g] = r->sp_cap[g] = 0;
        if (t->region & WSYNC_CTL_TARGET_STAGING) {
            uint64_t slot = wsync_sparse_slot_bytes(t->desc.len, r->assign.n_trainers);
            if (slot == 0)
                return wsync_error_set(err, WSYNC_ERR_LIMIT,
                                        "%s: inference rank %u's staging (%llu bytes) has no slot of %u bytes for each of %u trainers",
                                        r->me, (unsigned)t->rank, (unsigned long long)t->desc.len,
                                        WSYNC_SPARSE_HEADER, (unsigned)r->assign.n_trainers);
            r->sp_off[g] = at;
            r->sp_cap[g] = r->sp_on ? slot : WSYNC_SPARSE_HEADER; /* off: headers only */
            at += r->sp_cap[g];
            continue;
        }
        if (t->rank >= r->assign.n_inference) continue;
        for (h = 0; h < nt; h++)
            if ((r->assign.targets[h].region & WSYNC_CTL_TARGET_STAGING) && r->assign.targets[h].rank == t->rank)
                r->sp_stg[g] = h;
    }
    for (j = 0; j < nx; j++) {
        const wsync_ctl_transfer *x = &r->assign.transfers[j];
        uint64_t row = x->rows ? x->len / x->rows : 0;
        r->sp_elig[j] = (uint8_t)(r->sp_on && x->prep == WSYNC_CTL_PREP_NONE && r->sp_stg[x->target] != UINT32_MAX &&
                                  x->len && x->len % 2 == 0 && row % 2 == 0 && x->src_offset % 2 == 0 &&
                                  x->dst_offset % 2 == 0 && (x->rows < 2 || x->src_stride % 2 == 0) &&
                                  x->len / 2 <= 0xFFFFFFFFull);
        if (!r->sp_elig[j] && r->sp_on && x->prep == WSYNC_CTL_PREP_FP8 && r->sp_stg[x->target] != UINT32_MAX &&
            row && x->len % x->rows == 0 && x->len <= 0xFFFFFFFFull && x->src_offset % 2 == 0 &&
            x->scale_offset % 4 == 0) {
            int ib = wsync__rank_sp_inbox(r, x);
            if (!ib) r->sp_elig[j] = 2; /* its bf16 source diffed as above, and a copy of its e4m3 bytes */
            else if (ib == 2 && x->group > 0 && (x->rows < 2 || x->src_stride >= 2 * row)) {
                /* the same, after the barrier that fills the inbox */
                r->sp_elig[j] = 3;
                r->sp_fp8_late++;
                r->sp_wlate[r->sp_stg[x->target]] = 1;
                if (x->group > r->sp_late_last) r->sp_late_last = x->group;
            } else r->sp_fp8_gathered++; /* no barrier before it: dense */
        }
        if (r->sp_elig[j] && !r->sp_prev[x->src_region]) {
            uint32_t sr = x->src_region;
            /* the changes' lists start at 1/32 of the elements (3%: most RL steps), touched now so
               that the first sparse step pays no page faults */
            uint64_t cap = r->mr_len[sr] / 2 / 32 > 65536 ? r->mr_len[sr] / 2 / 32 : 65536;
            if ((uint64_t)(size_t)r->mr_len[sr] != r->mr_len[sr] ||
                !(r->sp_prev[sr] = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)r->mr_len[sr])) ||
                !(r->sp_chg[sr] = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)cap * sizeof **r->sp_chg)) ||
                !(r->sp_val[sr] = (uint16_t *)wsync__rdma_alloc(&r->a, (size_t)cap * sizeof **r->sp_val)))
                return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: a copy of region %u (%llu bytes) for sparse steps",
                                        r->me, (unsigned)sr, (unsigned long long)r->mr_len[sr]);
            memset(r->sp_chg[sr], 0, (size_t)cap * sizeof **r->sp_chg);
            memset(r->sp_val[sr], 0, (size_t)cap * sizeof **r->sp_val);
            r->sp_capchg[sr] = cap;
        }
    }
    if ((res = wsync__rank_sp_fp8_init(r, err)) != WSYNC_OK) return res;
    if (r->sp_on && !(r->sp_pos = (uint32_t *)wsync__rdma_alloc(&r->a, (size_t)WSYNC__SP_CHUNK * sizeof *r->sp_pos)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "rank: the diff's positions");
    r->sp_buf_len = at;
    if ((uint64_t)(size_t)at != at) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: slots", r->me);
    if (r->f->backend == WSYNC_FABRIC_HOST) {
        void *b = NULL;
        if (wsync_fabric_host_alloc(r->f, at, &b, err) != WSYNC_OK) return err->code;
        r->sp_buf = (uint8_t *)b;
        r->sp_buf_host = 1;
    } else if (!(r->sp_buf = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)at)))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: %llu bytes of slots", r->me, (unsigned long long)at);
    memset(r->sp_buf, 0, (size_t)at); /* its pages, before the first step */
    return r->f->reg(r->f->user, r->sp_buf, at, WSYNC_MEM_HOST, &r->sp_mr, &d, err);
}

static wsync_result wsync__rank_stg_init(wsync_rank *r, const wsync_rank_options *o, wsync_error *err)
{
    uint32_t e;
    for (e = 0; e < o->n_tensors && strcmp(o->tensors[e].name, WSYNC_CTL_STAGING) != 0; e++) {
    }
    if (e == o->n_tensors) return WSYNC_OK;
    r->stg_region = o->tensors[e].region;
    if (r->stg_region >= r->n_regions)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s: %s in region %u of %u", r->me, WSYNC_CTL_STAGING,
                                (unsigned)r->stg_region, (unsigned)r->n_regions);
    r->stg_slot = wsync_sparse_slot_bytes(r->mr_len[r->stg_region], r->assign.n_trainers);
    if (r->stg_slot == 0)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "%s: its staging (%llu bytes) has no slot for each of %u trainers",
                                r->me, (unsigned long long)r->mr_len[r->stg_region], (unsigned)r->assign.n_trainers);
    r->stg_lens = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)r->n_regions * sizeof *r->stg_lens);
    r->stg_senders = (uint32_t *)wsync__rdma_alloc(&r->a, ((size_t)r->assign.n_trainers + 1) * sizeof *r->stg_senders);
    if (!r->stg_lens || !r->stg_senders)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: staging tables", r->me);
    for (e = 0; e < r->n_regions; e++) r->stg_lens[e] = e == r->stg_region ? 0 : r->mr_len[e];
    r->stg_on = 1;
    return WSYNC_OK;
}

/* The first of n ascending elements c at or after e. */
static uint64_t wsync__sp_lb(const uint64_t *c, uint64_t n, uint64_t e)
{
    uint64_t l = 0, h = n;
    while (l < h) {
        uint64_t m = l + (h - l) / 2;
        if (c[m] < e) l = m + 1;
        else h = m;
    }
    return l;
}

/* The first changed element at or after e in region g's list. */
static uint64_t wsync__rank_sp_lb(const wsync_rank *r, uint32_t g, uint64_t e)
{
    return wsync__sp_lb(r->sp_chg[g], r->sp_nchg[g], e);
}

/* Changes of transfer x (its source rows, element by element); with pos
   and val, packs them: positions from its first destination element. */
static uint64_t wsync__rank_sp_walk(const wsync_rank *r, const wsync_ctl_transfer *x, uint32_t *pos, uint8_t *val)
{
    uint64_t rows = x->rows ? x->rows : 1, row = x->len / rows / 2, i, n = 0, k;
    const uint16_t *v = r->sp_val[x->src_region];
    const uint64_t *c = r->sp_chg[x->src_region];
    for (i = 0; i < rows; i++) {
        uint64_t s0 = (x->src_offset + i * (rows > 1 ? x->src_stride : 0)) / 2, a = wsync__rank_sp_lb(r, x->src_region, s0),
                 b = wsync__rank_sp_lb(r, x->src_region, s0 + row);
        if (pos)
            for (k = a; k < b; k++, n++) {
                pos[n] = (uint32_t)(i * row + (c[k] - s0));
                memcpy(val + 2 * n, &v[k], 2);
            }
        else n += b - a;
    }
    return n;
}

/* Room for `need` changes in a list of changed elements and values
   holding n (its capacity doubles). */
static wsync_result wsync__rank_sp_grow(wsync_rank *r, uint64_t **chg, uint16_t **val, uint64_t *cap_io, uint64_t n,
                                        uint64_t need, wsync_error *err)
{
    uint64_t cap = *cap_io ? *cap_io : 65536, *nc;
    uint16_t *nv;
    if (need <= *cap_io) return WSYNC_OK;
    while (cap < need) cap *= 2;
    nc = (uint64_t *)wsync__rdma_alloc(&r->a, (size_t)cap * sizeof *nc);
    nv = (uint16_t *)wsync__rdma_alloc(&r->a, (size_t)cap * sizeof *nv);
    if (!nc || !nv) {
        wsync__rdma_free(&r->a, nc);
        wsync__rdma_free(&r->a, nv);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: %llu changed positions", r->me,
                                (unsigned long long)cap);
    }
    if (n) {
        memcpy(nc, *chg, (size_t)n * sizeof *nc);
        memcpy(nv, *val, (size_t)n * sizeof *nv);
    }
    wsync__rdma_free(&r->a, *chg);
    wsync__rdma_free(&r->a, *val);
    *chg = nc;
    *val = nv;
    *cap_io = cap;
    return WSYNC_OK;
}

/* Elements [e0, e1) of region g against its copy, 32 Ki at a time: each
   change appended to the list (chg, val, *n, *cap); with `take`, the copy
   takes it while both sides of the chunk are in cache. */
static wsync_result wsync__rank_sp_diff_range(wsync_rank *r, uint32_t g, uint64_t e0, uint64_t e1, int take,
                                              uint64_t **chg_io, uint16_t **val_io, uint64_t *n, uint64_t *cap,
                                              wsync_error *err)
{
    uint8_t *prev = r->sp_prev[g];
    const uint8_t *cur = r->mr_addr[g];
    uint64_t at;
    wsync_result res;
    for (at = e0; at < e1; at += WSYNC__SP_CHUNK) {
        uint64_t m = e1 - at < WSYNC__SP_CHUNK ? e1 - at : WSYNC__SP_CHUNK, k, *chg,
                 c = wsync_diff(prev + 2 * at, cur + 2 * at, (size_t)m, 2, r->sp_pos);
        uint16_t *val;
        if (c == 0) continue;
        if ((res = wsync__rank_sp_grow(r, chg_io, val_io, cap, *n, *n + c, err)) != WSYNC_OK) return res;
        chg = *chg_io + *n;
        val = *val_io + *n;
        for (k = 0; k < c; k++) {
            uint64_t e = at + r->sp_pos[k];
            chg[k] = e;
            memcpy(&val[k], cur + 2 * e, 2);
            if (take) memcpy(prev + 2 * e, &val[k], 2);
        }
        *n += c;
    }
    return WSYNC_OK;
}

/* The diff of every region with a copy against it: r->sp_chg and
   sp_val, the changed elements and their values; the copy takes each
   change (a push that then fails leaves no base: the next one copies
   everything). The gather inbox is left out: the other trainers write
   into it during the push (wsync__rank_sp_late diffs what is read of it,
   after the barrier). */
static wsync_result wsync__rank_sp_diff(wsync_rank *r, wsync_error *err)
{
    uint32_t g;
    wsync_result res;
    for (g = 0; g < r->n_regions; g++) {
        uint64_t n = r->mr_len[g] / 2, i0 = n, i1 = n;
        if (!r->sp_prev[g]) continue;
        r->sp_nchg[g] = 0;
        if (r->sp_ib != UINT32_MAX && r->own[r->sp_ib].region == g && r->own[r->sp_ib].offset / 2 < n) {
            i0 = r->own[r->sp_ib].offset / 2;
            i1 = (r->own[r->sp_ib].offset + r->own[r->sp_ib].row_count + 1) / 2;
            if (i1 > n || i1 < i0) i1 = n;
        }
        if ((res = wsync__rank_sp_diff_range(r, g, 0, i0, 1, &r->sp_chg[g], &r->sp_val[g], &r->sp_nchg[g],
                                             &r->sp_capchg[g], err)) != WSYNC_OK ||
            (res = wsync__rank_sp_diff_range(r, g, i1, n, 1, &r->sp_chg[g], &r->sp_val[g], &r->sp_nchg[g],
                                             &r->sp_capchg[g], err)) != WSYNC_OK)
            return res;
    }
    return WSYNC_OK;
}

/* Room for `need` entries in a list of positions and elem-byte values
   holding n (it doubles). */
static wsync_result wsync__rank_sp_room(wsync_rank *r, uint32_t **pos, uint8_t **val, unsigned elem, uint64_t n,
                                        uint64_t *cap, uint64_t need, wsync_error *err)
{
    uint64_t c = *cap ? *cap : 4096;
    uint32_t *np;
    uint8_t *nv;
    if (need <= *cap) return WSYNC_OK;
    while (c < need) c *= 2;
    np = (uint32_t *)wsync__rdma_alloc(&r->a, (size_t)c * 4);
    nv = (uint8_t *)wsync__rdma_alloc(&r->a, (size_t)c * elem);
    if (!np || !nv || (uint64_t)(size_t)(c * 4) != c * 4) {
        wsync__rdma_free(&r->a, np);
        wsync__rdma_free(&r->a, nv);
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s: %llu moved fp8 positions", r->me, (unsigned long long)c);
    }
    if (n) {
        memcpy(np, *pos, (size_t)n * 4);
        memcpy(nv, *val, (size_t)n * elem);
    }
    wsync__rdma_free(&r->a, *pos);
    wsync__rdma_free(&r->a, *val);
    *pos = np;
    *val = nv;
    *cap = c;
    return WSYNC_OK;
}

/* Whether a change to one element (its e4m3 byte sent last, its new bf16
   value) may move its tile's scale (the one sent last). With a normal
   scale s = amax / 448 (rounded once), amax / s rounds to 448 (0x7E), so
   the amax's holders have 0x7E, and any value above the amax (a bf16 step,
   at least 2^-8 of it, above) saturates to 0x7E; a NaN is 0x7F, an
   infinity 0x7E (a tile with either has scale 1 while one stays); a tile
   of zeros (scale 1, bytes 0) has its amax raised by any value. So a
   change whose old and new bytes are below 0x7E, in a tile whose scale is
   normal and is not 1 with a zero byte, leaves the amax, and the scale, as
   they were; any other change has the tile's scale computed again. */
static int wsync__rank_sp_edge(uint8_t old, uint16_t v, const uint8_t *scale_sent)
{
    float s;
    uint8_t now;
    memcpy(&s, scale_sent, 4);
    if (!(s >= 1.17549435e-38f) || (s == 1.0f && (old & 0x7F) == 0)) return 1; /* FLT_MIN: a normal scale */
    now = wsync__e4m3_sat(wsync__quant_bf16_f32(v) / s);
    return (old & 0x7F) >= 0x7E || (now & 0x7F) >= 0x7E;
}

/* fp8 transfer j in a sparse step, from the diff of its bf16 source
   (sp_chg, sp_val): a tile with no changed element is as sent; in one with
   a change that may move its scale (wsync__rank_sp_edge) the scale is
   computed again (the quantizer's own function on the same tile: the same
   bits); where it moved, the tile is quantized again and kept whole with
   its scale; else each changed element's e4m3 byte (the quantizer's
   conversion, the same scale) is kept where it differs from the byte sent.
   The copy takes them. Positions ascend (row by row, tile by tile along a
   row). The diff: nch changed elements of its source region (chg, ascending)
   and their values. */
static wsync_result wsync__rank_sp_fp8(wsync_rank *r, uint32_t j, const uint64_t *chg, const uint16_t *val,
                                       uint64_t nch, wsync_error *err)
{
    const wsync_ctl_transfer *x = &r->assign.transfers[j];
    uint64_t rows = x->rows, cols = x->len / rows, stride = rows > 1 ? x->src_stride / 2 : cols;
    uint64_t br = x->block ? x->block : rows, bc = x->block ? x->block : cols, tcols = (cols + bc - 1) / bc;
    uint32_t g = x->src_region;
    uint64_t r0, rr, t, k, b, kb = wsync__sp_lb(chg, nch, x->src_offset / 2);
    const uint16_t *src = (const uint16_t *)(const void *)(r->mr_addr[g] + x->src_offset);
    uint8_t *q = r->sp_q + r->sp_qoff[j], *qs = q + wsync__sp_pad8(x->len), *band = r->sp_band,
            *tile = r->sp_band + r->sp_tile_at, *mov = r->sp_tmov;
    float *sc = r->sp_tsc;
    wsync_sparse_stats *st = &r->sp_stats;
    wsync_result res;
    r->sp_foff[j] = r->sp_fn;
    r->sp_soff[j] = r->sp_sn;
    for (r0 = 0; r0 < rows; r0 += br) {
        uint64_t r1 = rows - r0 > br ? r0 + br : rows, h = r1 - r0, s0 = (r0 / br) * tcols;
        if ((res = wsync__rank_sp_room(r, &r->sp_fpos, &r->sp_fval, 1, r->sp_fn, &r->sp_fcap, r->sp_fn + h * cols,
                                       err)) != WSYNC_OK ||
            (res = wsync__rank_sp_room(r, &r->sp_spos, &r->sp_sval, 4, r->sp_sn, &r->sp_scap, r->sp_sn + tcols,
                                       err)) != WSYNC_OK)
            return res;
        /* 1: an element changed; 3: one that may move the scale; 2: the scale moved; 5: a byte moved */
        memset(mov, 0, (size_t)tcols);
        for (rr = r0, k = kb; rr < r1; rr++) { /* the rows ascend in the region: a cursor, no search */
            uint64_t e0 = x->src_offset / 2 + rr * stride, at = rr * cols;
            while (k < nch && chg[k] < e0) k++;
            for (; k < nch && chg[k] < e0 + cols; k++) {
                t = (chg[k] - e0) / bc;
                if (mov[t] != 3) mov[t] = wsync__rank_sp_edge(q[at + chg[k] - e0], val[k], qs + 4 * (s0 + t)) ? 3 : 1;
            }
        }
        st->fp8_tiles += tcols;
        for (t = 0; t < tcols; t++) {
            uint64_t c0 = t * bc, w = cols - c0 > bc ? bc : cols - c0;
            if (!mov[t]) continue;
            if (mov[t] == 1) { /* no change can move the scale: the one sent */
                memcpy(&sc[t], qs + 4 * (s0 + t), 4);
                continue;
            }
            mov[t] = 1;
            sc[t] = wsync__quant_tile_scale(src, stride, r0, r1, c0, c0 + w);
            if (memcmp(&sc[t], qs + 4 * (s0 + t), 4) == 0) continue;
            mov[t] = 2; /* the scale moved: the whole tile, quantized again */
            if ((res = wsync_quantize_e4m3(src + r0 * stride + c0, h, w, stride, x->block, tile, &sc[t], err)) !=
                WSYNC_OK)
                return res;
            for (rr = 0; rr < h; rr++) memcpy(band + rr * cols + c0, tile + rr * w, (size_t)w);
            r->sp_spos[r->sp_sn] = (uint32_t)(s0 + t);
            memcpy(r->sp_sval + 4 * r->sp_sn, &sc[t], 4);
            memcpy(qs + 4 * (s0 + t), &sc[t], 4);
            r->sp_sn++;
            st->fp8_tiles_rescaled++;
        }
        for (rr = r0, k = kb; rr < r1; rr++) {
            uint64_t e0 = x->src_offset / 2 + rr * stride, at = rr * cols;
            uint32_t *fp = r->sp_fpos + r->sp_fn;
            uint8_t *fv = r->sp_fval + r->sp_fn;
            while (k < nch && chg[k] < e0) k++;
            b = k;
            while (b < nch && chg[b] < e0 + cols) b++;
            for (t = 0; t < tcols; t++) {
                uint64_t c0 = t * bc, c1 = cols - c0 > bc ? c0 + bc : cols, c;
                if (mov[t] == 2) { /* every byte of the tile's row */
                    for (c = c0; c < c1; c++) *fp++ = (uint32_t)(at + c);
                    memcpy(fv, band + (rr - r0) * cols + c0, (size_t)(c1 - c0));
                    memcpy(q + at + c0, fv, (size_t)(c1 - c0));
                    fv += c1 - c0;
                    while (k < b && chg[k] - e0 < c1) k++;
                    continue;
                }
                for (; k < b && chg[k] - e0 < c1; k++) {
                    uint8_t code = wsync__e4m3_sat(wsync__quant_bf16_f32(val[k]) / sc[t]);
                    c = chg[k] - e0;
                    if (code == q[at + c]) continue; /* the e4m3 grid hides the change */
                    q[at + c] = code;
                    *fp++ = (uint32_t)(at + c);
                    *fv++ = code;
                    mov[t] = 5;
                }
            }
            r->sp_fn = (uint64_t)(fp - r->sp_fpos);
        }
        kb = k;
        for (t = 0; t < tcols; t++) st->fp8_tiles_moved += mov[t] == 5;
    }
    r->sp_cnt[j] = r->sp_fn - r->sp_foff[j];
    r->sp_scnt[j] = r->sp_sn - r->sp_soff[j];
    st->fp8_bytes += x->len;
    st->fp8_moved += r->sp_cnt[j];
    return WSYNC_OK;
}

/* A dense step's preparation of fp8 transfer j (codes in tmp, scales at
   scales_at): kept as what was last sent. */
static void wsync__rank_sp_keep(wsync_rank *r, uint32_t j, const uint8_t *tmp, uint64_t scales_at)
{
    const wsync_ctl_transfer *x = &r->assign.transfers[j];
    uint8_t *q = r->sp_q + r->sp_qoff[j];
    memcpy(q, tmp, (size_t)x->len);
    memcpy(q + wsync__sp_pad8(x->len), tmp + scales_at,
           (size_t)(4 * wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block)));
}

/* Staging target g's slot (bytes packed at r->sp_off[g]) into its place at
   the receiver; the transfers sent in it then count as run. */
static wsync_result wsync__rank_sp_put(wsync_rank *r, uint32_t g, uint64_t bytes, wsync_error *err)
{
    const wsync_ctl_target *t = &r->assign.targets[g];
    uint32_t j, nx = r->assign.n_transfers;
    uint64_t at = (uint64_t)r->assign.rank * wsync_sparse_slot_bytes(t->desc.len, r->assign.n_trainers);
    char why[320];
    wsync_result res = r->f->write(r->f->user, r->sp_mr, r->sp_off[g], r->rem[g], at, bytes, err);
    if (res != WSYNC_OK) {
        snprintf(why, sizeof why, "%.250s", err->message);
        return wsync_error_set(err, res, "%s: writing %llu bytes into inference rank %u's staging: %s", r->me,
                                (unsigned long long)bytes, (unsigned)t->rank, why);
    }
    for (j = 0; j < nx; j++)
        if (r->sp_skip[j] && r->sp_stg[r->assign.transfers[j].target] == g) wsync__rank_ran(r, &r->assign.transfers[j]);
    return WSYNC_OK;
}

/* Before a push's dense writes: the diff (when the last step sent is the
   receivers' and the step moves everything), the choice per receiver
   region (sparse when its slot bytes are at most sp_max of its dense
   bytes and every sparse region of the rank fits the slot, the largest
   going dense first), then every slot packed and written; the transfers
   sent in a slot are marked run and skipped by the dense writes. The
   slots of ranks that transfers from the gather inbox (sp_elig 3) write
   to wait for wsync__rank_sp_late. */
static wsync_result wsync__rank_sp_send(wsync_rank *r, wsync_error *err)
{
    uint32_t nt = r->assign.n_targets, nx = r->assign.n_transfers, g, j;
    int sparse = r->sp_on && r->sp_base && !r->subset;
    wsync_sparse_stats *st = &r->sp_stats;
    wsync_result res;
    double t0 = wsync__ctl_now(), t1;
    memset(st, 0, sizeof *st);
    st->step = r->step;
    memset(r->sp_skip, 0, (size_t)nx);
    st->fp8_gathered = r->sp_fp8_gathered;
    r->sp_late_on = sparse && r->sp_fp8_late;
    r->sp_late_s = 0;
    for (j = 0; !sparse && j < nx; j++) /* from the gather inbox, written dense */
        st->fp8_gathered += r->sp_elig[j] == 3 && (!r->subset || r->sel[j]);
    if (sparse && (res = wsync__rank_sp_diff(r, err)) != WSYNC_OK) return res;
    t1 = wsync__ctl_now();
    r->sp_fn = r->sp_sn = 0;
    for (j = 0; sparse && j < nx; j++) /* fp8: quantized and compared tile by tile */
        if (r->sp_elig[j] == 2 && (res = wsync__rank_sp_fp8(r, j, r->sp_chg[r->assign.transfers[j].src_region],
                                                           r->sp_val[r->assign.transfers[j].src_region],
                                                           r->sp_nchg[r->assign.transfers[j].src_region], err)) !=
                                      WSYNC_OK)
            return res;
    st->fp8_s = wsync__ctl_now() - t1;
    t1 = wsync__ctl_now();
    st->diff_s = t1 - t0;
    for (g = 0; g < nt; g++) r->sp_tsb[g] = r->sp_tdb[g] = r->sp_tsp[g] = 0;
    for (j = 0; j < nx; j++) { /* the receiver regions this step writes, as dense bytes (fp8: and the scales) */
        const wsync_ctl_transfer *x = &r->assign.transfers[j];
        if (!r->sp_elig[j] || r->sp_elig[j] == 3 || (r->subset && !r->sel[j])) continue; /* 3: wsync__rank_sp_late */
        r->sp_tdb[x->target] += x->len;
        if (r->sp_elig[j] == 2) r->sp_tdb[x->target] += 4 * wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block);
    }
    if (sparse) {
        for (j = 0; j < nx; j++) {
            const wsync_ctl_transfer *x = &r->assign.transfers[j];
            if (r->sp_elig[j] == 3) continue;
            if (r->sp_elig[j] == 2) { /* counted by the compare */
                if (r->sp_cnt[j]) r->sp_tsb[x->target] += wsync_sparse_section_bytes(1, r->sp_cnt[j]);
                if (r->sp_scnt[j]) r->sp_tsb[x->target] += wsync_sparse_section_bytes(4, r->sp_scnt[j]);
                continue;
            }
            if (!r->sp_elig[j]) continue;
            r->sp_cnt[j] = wsync__rank_sp_walk(r, x, NULL, NULL);
            if (r->sp_cnt[j]) r->sp_tsb[x->target] += wsync_sparse_section_bytes(2, r->sp_cnt[j]);
        }
        for (g = 0; g < nt; g++)
            if (r->sp_tdb[g]) r->sp_tsp[g] = (double)r->sp_tsb[g] <= r->sp_max * (double)r->sp_tdb[g];
        for (g = 0; g < nt; g++) { /* each slot: the sparse regions of its rank must fit */
            uint64_t used = WSYNC_SPARSE_HEADER;
            uint32_t h;
            if (!(r->assign.targets[g].region & WSYNC_CTL_TARGET_STAGING)) continue;
            for (h = 0; h < nt; h++)
                if (r->sp_stg[h] == g && r->sp_tsp[h]) used += r->sp_tsb[h];
            while (used > r->sp_cap[g]) {
                uint32_t big = UINT32_MAX;
                for (h = 0; h < nt; h++)
                    if (r->sp_stg[h] == g && r->sp_tsp[h] && (big == UINT32_MAX || r->sp_tsb[h] > r->sp_tsb[big])) big = h;
                r->sp_tsp[big] = 2; /* overflow: dense */
                used -= r->sp_tsb[big];
            }
        }
    }
    for (g = 0; g < nt; g++) { /* pack each slot */
        wsync_sparse_writer w;
        if (!(r->assign.targets[g].region & WSYNC_CTL_TARGET_STAGING)) continue;
        wsync_sparse_begin(&w, r->sp_buf + r->sp_off[g], r->sp_cap[g], r->step, r->sp_base, r->assign.rank);
        for (j = 0; sparse && j < nx; j++) {
            const wsync_ctl_transfer *x = &r->assign.transfers[j];
            uint32_t *pos;
            uint8_t *val;
            if (!r->sp_elig[j] || r->sp_elig[j] == 3 || r->sp_stg[x->target] != g || r->sp_tsp[x->target] != 1)
                continue;
            r->sp_skip[j] = 1;
            if (r->sp_elig[j] == 2) { /* fp8: the moved bytes, then the moved scales */
                if (r->sp_cnt[j]) {
                    if ((res = wsync_sparse_section(&w, r->assign.targets[x->target].region, 1, x->dst_offset,
                                                    r->sp_cnt[j], &pos, &val, err)) != WSYNC_OK)
                        return res;
                    memcpy(pos, r->sp_fpos + r->sp_foff[j], (size_t)r->sp_cnt[j] * 4);
                    memcpy(val, r->sp_fval + r->sp_foff[j], (size_t)r->sp_cnt[j]);
                }
                if (r->sp_scnt[j]) {
                    if ((res = wsync_sparse_section(&w, r->assign.targets[x->target].region, 4, x->scale_offset / 4,
                                                    r->sp_scnt[j], &pos, &val, err)) != WSYNC_OK)
                        return res;
                    memcpy(pos, r->sp_spos + r->sp_soff[j], (size_t)r->sp_scnt[j] * 4);
                    memcpy(val, r->sp_sval + 4 * r->sp_soff[j], (size_t)r->sp_scnt[j] * 4);
                }
                st->changes += r->sp_cnt[j] + r->sp_scnt[j];
                continue;
            }
            if (!r->sp_cnt[j]) continue;
            if ((res = wsync_sparse_section(&w, r->assign.targets[x->target].region, 2, x->dst_offset / 2, r->sp_cnt[j],
                                            &pos, &val, err)) != WSYNC_OK)
                return res; /* cannot be: the fit was checked */
            wsync__rank_sp_walk(r, x, pos, val);
            st->changes += r->sp_cnt[j];
        }
        if (r->sp_late_on && r->sp_wlate[g]) { /* finished once the inbox's transfers are packed */
            r->sp_w[g] = w;
            continue;
        }
        st->staged_bytes += wsync_sparse_finish(&w);
        r->sp_tsb[g] = w.used; /* the staging target's: its slot's bytes */
    }
    for (g = 0; g < nt; g++)
        if (r->sp_tdb[g] && r->sp_tsp[g] == 1) st->regions_sparse++;
        else if (r->sp_tdb[g]) st->regions_dense++, st->regions_overflow += r->sp_tsp[g] == 2;
    st->pack_s = wsync__ctl_now() - t1;
    t1 = wsync__ctl_now();
    for (g = 0; g < nt; g++) /* the slots' writes */
        if ((r->assign.targets[g].region & WSYNC_CTL_TARGET_STAGING) && !(r->sp_late_on && r->sp_wlate[g]) &&
            (res = wsync__rank_sp_put(r, g, r->sp_tsb[g], err)) != WSYNC_OK)
            return res;
    st->wire_s = wsync__ctl_now() - t1; /* push adds the dense writes and the flush */
    r->sp_skipping = 1;
    return WSYNC_OK;
}

/* A sparse push, after the barrier before mesh group grp (transfers
   [first, end)): its transfers from the gather inbox (sp_elig 3), whose
   rows are all in place now. Each one's source rows diffed against the
   copy of the inbox (the copy not yet taking them: several receivers'
   transfers read the same rows), compared tile by tile as any fp8
   transfer (wsync__rank_sp_fp8), then the copy takes their rows. Per
   receiver region, their slot bytes against their dense bytes (sparse at
   most sp_max), and, per rank, what its slot holds already plus the
   sparse ones must fit (the largest dense first); the sparse ones packed
   into the slots sp_send began and skipped by the dense writes. After
   the last such group the waiting slots are finished and written. */
static wsync_result wsync__rank_sp_late(wsync_rank *r, uint32_t grp, uint32_t first, uint32_t end, wsync_error *err)
{
    uint32_t nt = r->assign.n_targets, g, h, j;
    wsync_sparse_stats *st = &r->sp_stats;
    double t0 = wsync__ctl_now(), t1, t2;
    wsync_result res;
    int any = 0;
    for (j = first; j < end; j++) {
        const wsync_ctl_transfer *x = &r->assign.transfers[j];
        uint64_t i, row = x->len / x->rows, stride = x->rows > 1 ? x->src_stride / 2 : row;
        if (r->sp_elig[j] != 3) continue;
        any = 1;
        r->sp_lnchg = 0;
        for (i = 0; i < x->rows; i++) {
            uint64_t e0 = x->src_offset / 2 + i * stride;
            if ((res = wsync__rank_sp_diff_range(r, x->src_region, e0, e0 + row, 0, &r->sp_lchg, &r->sp_lval,
                                                 &r->sp_lnchg, &r->sp_lcap, err)) != WSYNC_OK)
                return res;
        }
        t1 = wsync__ctl_now();
        if ((res = wsync__rank_sp_fp8(r, j, r->sp_lchg, r->sp_lval, r->sp_lnchg, err)) != WSYNC_OK) return res;
        st->fp8_s += wsync__ctl_now() - t1;
    }
    if (!any) return WSYNC_OK;
    for (j = first; j < end; j++) { /* the copy takes the rows read */
        const wsync_ctl_transfer *x = &r->assign.transfers[j];
        uint64_t i, row = x->len / x->rows, stride = x->rows > 1 ? x->src_stride : 2 * row;
        if (r->sp_elig[j] != 3) continue;
        for (i = 0; i < x->rows; i++)
            memcpy(r->sp_prev[x->src_region] + x->src_offset + i * stride,
                   r->mr_addr[x->src_region] + x->src_offset + i * stride, (size_t)(2 * row));
    }
    t1 = wsync__ctl_now();
    st->diff_s += t1 - t0;
    for (g = 0; g < nt; g++) r->sp_ltsb[g] = r->sp_ltdb[g] = r->sp_ltsp[g] = 0;
    for (j = first; j < end; j++) {
        const wsync_ctl_transfer *x = &r->assign.transfers[j];
        if (r->sp_elig[j] != 3) continue;
        r->sp_ltdb[x->target] += x->len + 4 * wsync_quantize_scale_count(x->rows, x->len / x->rows, x->block);
        if (r->sp_cnt[j]) r->sp_ltsb[x->target] += wsync_sparse_section_bytes(1, r->sp_cnt[j]);
        if (r->sp_scnt[j]) r->sp_ltsb[x->target] += wsync_sparse_section_bytes(4, r->sp_scnt[j]);
    }
    for (g = 0; g < nt; g++)
        if (r->sp_ltdb[g]) r->sp_ltsp[g] = (double)r->sp_ltsb[g] <= r->sp_max * (double)r->sp_ltdb[g];
    for (g = 0; g < nt; g++) { /* each slot: what it holds and these sparse regions must fit */
        uint64_t used;
        if (!(r->assign.targets[g].region & WSYNC_CTL_TARGET_STAGING) || !r->sp_wlate[g]) continue;
        used = r->sp_w[g].used;
        for (h = 0; h < nt; h++)
            if (r->sp_stg[h] == g && r->sp_ltsp[h] == 1) used += r->sp_ltsb[h];
        while (used > r->sp_cap[g]) {
            uint32_t big = UINT32_MAX;
            for (h = 0; h < nt; h++)
                if (r->sp_stg[h] == g && r->sp_ltsp[h] == 1 && (big == UINT32_MAX || r->sp_ltsb[h] > r->sp_ltsb[big]))
                    big = h;
            r->sp_ltsp[big] = 2; /* overflow: dense */
            used -= r->sp_ltsb[big];
        }
    }
    for (j = first; j < end; j++) { /* pack */
        const wsync_ctl_transfer *x = &r->assign.transfers[j];
        wsync_sparse_writer *w = &r->sp_w[r->sp_stg[x->target]];
        uint32_t *pos;
        uint8_t *val;
        if (r->sp_elig[j] != 3) continue;
        if (r->sp_ltsp[x->target] != 1) {
            st->fp8_gathered++;
            continue;
        }
        if (r->sp_cnt[j]) {
            if ((res = wsync_sparse_section(w, r->assign.targets[x->target].region, 1, x->dst_offset, r->sp_cnt[j],
                                            &pos, &val, err)) != WSYNC_OK)
                return res; /* cannot be: the fit was checked */
            memcpy(pos, r->sp_fpos + r->sp_foff[j], (size_t)r->sp_cnt[j] * 4);
            memcpy(val, r->sp_fval + r->sp_foff[j], (size_t)r->sp_cnt[j]);
        }
        if (r->sp_scnt[j]) {
            if ((res = wsync_sparse_section(w, r->assign.targets[x->target].region, 4, x->scale_offset / 4,
                                            r->sp_scnt[j], &pos, &val, err)) != WSYNC_OK)
                return res;
            memcpy(pos, r->sp_spos + r->sp_soff[j], (size_t)r->sp_scnt[j] * 4);
            memcpy(val, r->sp_sval + 4 * r->sp_soff[j], (size_t)r->sp_scnt[j] * 4);
        }
        r->sp_skip[j] = 1;
        st->changes += r->sp_cnt[j] + r->sp_scnt[j];
        st->dense_bytes -= x->len;
        st->fp8_gathered_sparse++;
    }
    for (g = 0; g < nt; g++)
        if (r->sp_ltdb[g] && r->sp_ltsp[g] == 1) st->regions_sparse++;
        else if (r->sp_ltdb[g]) st->regions_dense++, st->regions_overflow += r->sp_ltsp[g] == 2;
    t2 = wsync__ctl_now();
    st->pack_s += t2 - t1;
    r->sp_late_s += t2 - t0;
    if (grp != r->sp_late_last) return WSYNC_OK;
    for (g = 0; g < nt; g++) { /* the waiting slots, finished and written */
        uint64_t bytes;
        if (!(r->assign.targets[g].region & WSYNC_CTL_TARGET_STAGING) || !r->sp_wlate[g]) continue;
        bytes = wsync_sparse_finish(&r->sp_w[g]);
        st->staged_bytes += bytes;
        if ((res = wsync__rank_sp_put(r, g, bytes, err)) != WSYNC_OK) return res;
    }
    return WSYNC_OK;
}

/* After a push that succeeded: the copy becomes what was sent (the diff
   already took the changes; a dense step copies all of it). A step of a
   subset, or a failed push, leaves no base: the next step goes dense. */
static void wsync__rank_sp_after(wsync_rank *r, int ok, int diffed)
{
    uint32_t g;
    double t0 = wsync__ctl_now();
    r->sp_skipping = 0;
    r->sp_late_on = 0;
    if (!ok || r->subset || !r->sp_on) {
        r->sp_base = 0;
        return;
    }
    for (g = 0; g < r->n_regions; g++) {
        uint8_t *prev = r->sp_prev[g];
        const uint8_t *cur = r->mr_addr[g];
        if (prev && !diffed) memcpy(prev, cur, (size_t)r->mr_len[g]);
    }
    r->sp_base = r->step;
    r->sp_stats.update_s = wsync__ctl_now() - t0;
}

WSYNC_DEF void wsync_rank_sparse_reset(wsync_rank *r)
{
    if (r) r->sp_base = 0;
}

WSYNC_DEF void wsync_rank_sparse_stats(const wsync_rank *r, wsync_sparse_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!r) return;
    if (r->role == WSYNC_CTL_INFERENCE) pthread_mutex_lock((pthread_mutex_t *)&r->mu);
    *out = r->sp_stats;
    if (r->role == WSYNC_CTL_INFERENCE) pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
}

/* Every transfer (of the selection; not those sent in a slot), mesh group
   by group, the barrier between groups. */
static wsync_result wsync__rank_push_groups(wsync_rank *r, wsync_error *err)
{
    uint32_t g, first = 0, n = r->assign.n_transfers;
    wsync_result res;
    for (g = 0; g < r->assign.n_groups; g++) { /* transfers ascend by group (checked at decode) */
        uint32_t end = first;
        while (end < n && r->assign.transfers[end].group == g) end++;
        if (r->sp_late_on && (res = wsync__rank_sp_late(r, g, first, end, err)) != WSYNC_OK) return res;
        if ((res = wsync_rank_push_some(r, first, end - first, g + 1 == r->assign.n_groups, err)) != WSYNC_OK)
            return res;
        if (g + 1 < r->assign.n_groups && (res = wsync__rank_barrier(r, g, err)) != WSYNC_OK) return res;
        first = end;
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_rank_push(wsync_rank *r, wsync_error *err)
{
    uint32_t g, first = 0, n;
    wsync_result res;
    wsync_error local;
    if (!err) err = &local;
    if (!r || r->role != WSYNC_CTL_TRAINER)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "push: a trainer's rank");
    n = r->assign.n_transfers;
    if (r->sp_stg) { /* receivers with staging: the slots first (the sparse step) */
        double t0;
        int diffed = r->sp_on && r->sp_base && !r->subset;
        if ((res = wsync__rank_sp_send(r, err)) != WSYNC_OK) {
            wsync__rank_sp_after(r, 0, 0);
            return res;
        }
        t0 = wsync__ctl_now();
        r->sp_stats.dense_bytes = 0;
        for (g = 0; g < n; g++)
            if (!r->sp_skip[g] && (!r->subset || r->sel[g])) r->sp_stats.dense_bytes += r->assign.transfers[g].len;
        r->sp_qfill = r->sp_q && !diffed && !r->subset; /* fp8: the preparation keeps what it sends */
        res = wsync__rank_push_groups(r, err);
        r->sp_qfill = 0;
        r->sp_stats.wire_s += wsync__ctl_now() - t0 - r->sp_late_s; /* less the inbox's packing */
        wsync__rank_sp_after(r, res == WSYNC_OK, diffed);
        return res;
    }
    (void)first;
    return wsync__rank_push_groups(r, err);
}

WSYNC_DEF wsync_result wsync_rank_done(wsync_rank *r, uint64_t step, wsync_result result, const char *why,
                                       wsync_error *err)
{
    wsync_error_set(err, WSYNC_OK, NULL);
    wsync_ctl_msg m;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!r || r->role != WSYNC_CTL_TRAINER)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "done: a trainer's rank");
    memset(&m, 0, sizeof m);
    m.type = WSYNC_CTL_DONE;
    m.step = step;
    m.status = (uint32_t)result;
    if (why) snprintf(m.text, sizeof m.text, "%.255s", why);
    m.n_named = r->subset ? r->n_own : WSYNC_CTL_NAMED_ALL;
    m.named = r->named;
    m.n_ran = r->assign.n_transfers;
    m.runs = r->runs;
    m.ran = r->ran;
    return wsync__ctl_send(r->fd, &r->sess, &m, &r->a, "the controller", err);
}

WSYNC_DEF const wsync_ctl_transfer *wsync_rank_transfers(const wsync_rank *r, uint32_t *n)
{
    if (n) *n = r ? r->assign.n_transfers : 0;
    return r ? r->assign.transfers : NULL;
}

WSYNC_DEF uint64_t wsync_rank_version(const wsync_rank *r)
{
    return r ? __atomic_load_n(&r->version, __ATOMIC_ACQUIRE) : 0;
}

WSYNC_DEF const volatile uint64_t *wsync_rank_version_word(const wsync_rank *r)
{
    return r ? &r->version : NULL;
}

WSYNC_DEF wsync_result wsync_rank_wait_version(wsync_rank *r, uint64_t step, int timeout_ms, wsync_error *err)
{
    struct timespec until;
    wsync_result res = WSYNC_OK;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!r || r->role != WSYNC_CTL_INFERENCE)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "wait_version: an inference rank");
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->version >= step) break;
        if (r->aborted >= step) {
            res = wsync_error_set(err, WSYNC_ERR_IO, "%s: %s", r->me, r->why);
            break;
        }
        if (r->ended) {
            res = wsync_error_set(err, WSYNC_ERR_IO, "%s at version %llu: %s", r->me, (unsigned long long)r->version,
                                   r->why);
            break;
        }
        if (timeout_ms == 0 ||
            (timeout_ms > 0 && pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT)) {
            res = wsync_error_set(err, WSYNC_ERR_LIMIT, "%s: still at version %llu after %d ms", r->me,
                                   (unsigned long long)r->version, timeout_ms);
            break;
        }
        if (timeout_ms < 0) pthread_cond_wait(&r->cv, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return res;
}

WSYNC_DEF int wsync_rank_ended(wsync_rank *r, char *why, size_t cap)
{
    int e;
    if (!r) return 1;
    pthread_mutex_lock(&r->mu);
    e = r->ended;
    if (e && why && cap) {
        size_t k = strlen(r->why);
        if (k >= cap) k = cap - 1;
        memcpy(why, r->why, k);
        why[k] = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return e;
}

WSYNC_DEF void wsync_rank_close(wsync_rank *r)
{
    uint32_t i;
    if (!r) return;
    if (r->fd >= 0) shutdown(r->fd, SHUT_RDWR); /* wakes the thread */
    if (r->th_on) pthread_join(r->th, NULL);
    if (r->fd >= 0) close(r->fd);
    for (i = 0; r->rem && i < r->assign.n_targets; i++)
        if (r->rem[i]) r->f->close_remote(r->f->user, r->rem[i]);
    wsync__rdma_free(&r->a, r->rem);
    if (r->staging_mr) r->f->dereg(r->f->user, r->staging_mr);
    if (r->staging_host) wsync_fabric_host_free(r->f, r->staging);
    else wsync__rdma_free(&r->a, r->staging);
    if (r->sp_mr) r->f->dereg(r->f->user, r->sp_mr);
    if (r->sp_buf_host) wsync_fabric_host_free(r->f, r->sp_buf);
    else wsync__rdma_free(&r->a, r->sp_buf);
    for (i = 0; r->sp_prev && i < r->n_regions; i++) {
        wsync__rdma_free(&r->a, r->sp_prev[i]);
        wsync__rdma_free(&r->a, r->sp_chg[i]);
        wsync__rdma_free(&r->a, r->sp_val[i]);
    }
    wsync__rdma_free(&r->a, r->sp_prev);
    wsync__rdma_free(&r->a, r->sp_chg);
    wsync__rdma_free(&r->a, r->sp_val);
    wsync__rdma_free(&r->a, r->sp_nchg);
    wsync__rdma_free(&r->a, r->sp_capchg);
    wsync__rdma_free(&r->a, r->sp_stg);
    wsync__rdma_free(&r->a, r->sp_off);
    wsync__rdma_free(&r->a, r->sp_cap);
    wsync__rdma_free(&r->a, r->sp_tsb);
    wsync__rdma_free(&r->a, r->sp_tdb);
    wsync__rdma_free(&r->a, r->sp_tsp);
    wsync__rdma_free(&r->a, r->sp_elig);
    wsync__rdma_free(&r->a, r->sp_skip);
    wsync__rdma_free(&r->a, r->sp_cnt);
    wsync__rdma_free(&r->a, r->sp_pos);
    wsync__rdma_free(&r->a, r->sp_q);
    wsync__rdma_free(&r->a, r->sp_qoff);
    wsync__rdma_free(&r->a, r->sp_band);
    wsync__rdma_free(&r->a, r->sp_tmov);
    wsync__rdma_free(&r->a, r->sp_tsc);
    wsync__rdma_free(&r->a, r->sp_fpos);
    wsync__rdma_free(&r->a, r->sp_fval);
    wsync__rdma_free(&r->a, r->sp_spos);
    wsync__rdma_free(&r->a, r->sp_sval);
    wsync__rdma_free(&r->a, r->sp_foff);
    wsync__rdma_free(&r->a, r->sp_soff);
    wsync__rdma_free(&r->a, r->sp_scnt);
    wsync__rdma_free(&r->a, r->sp_wlate);
    wsync__rdma_free(&r->a, r->sp_w);
    wsync__rdma_free(&r->a, r->sp_ltsb);
    wsync__rdma_free(&r->a, r->sp_ltdb);
    wsync__rdma_free(&r->a, r->sp_ltsp);
    wsync__rdma_free(&r->a, r->sp_lchg);
    wsync__rdma_free(&r->a, r->sp_lval);
    wsync__rdma_free(&r->a, r->stg_lens);
    wsync__rdma_free(&r->a, r->stg_senders);
    wsync__rdma_free(&r->a, r->tasks);
    wsync__rdma_free(&r->a, r->run);
    wsync__rdma_free(&r->a, r->own);
    wsync__rdma_free(&r->a, r->by_name);
    wsync__rdma_free(&r->a, r->reads_off);
    wsync__rdma_free(&r->a, r->reads);
    wsync__rdma_free(&r->a, r->named);
    wsync__rdma_free(&r->a, r->sel);
    wsync__rdma_free(&r->a, r->ran);
    wsync__rdma_free(&r->a, r->mr_addr);
    wsync_ctl_msg_free(&r->assign);
    wsync__rdma_free(&r->a, r->mrs);
    wsync__rdma_free(&r->a, r->mr_len);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    wsync__rdma_free(&r->a, r);
}

#else /* !WSYNC__RDMA_OK */

WSYNC_DEF wsync_result wsync_controller_open(const wsync_controller_options *opt, wsync_controller **out,
                                             wsync_error *err)
{
    (void)opt;
    if (out) *out = NULL;
    return wsync__rdma_no(err, "the controller");
}
WSYNC_DEF unsigned wsync_controller_port(const wsync_controller *c)
{
    (void)c;
    return 0;
}
WSYNC_DEF wsync_result wsync_controller_accept(wsync_controller *c, wsync_error *err)
{
    (void)c;
    return wsync__rdma_no(err, "the controller");
}
WSYNC_DEF void wsync_controller_plan_get(const wsync_controller *c, wsync_controller_plan *out)
{
    (void)c;
    if (out) memset(out, 0, sizeof *out);
}
WSYNC_DEF const struct wsync_plan *wsync_controller_plan_ref(const wsync_controller *c)
{
    (void)c;
    return NULL;
}
WSYNC_DEF wsync_result wsync_controller_step(wsync_controller *c, uint64_t step, wsync_error *err)
{
    (void)c;
    (void)step;
    return wsync__rdma_no(err, "the controller");
}
WSYNC_DEF wsync_result wsync_controller_go(wsync_controller *c, uint64_t step, wsync_error *err)
{
    (void)c;
    (void)step;
    return wsync__rdma_no(err, "the controller");
}
WSYNC_DEF wsync_result wsync_controller_finish(wsync_controller *c, uint64_t step, wsync_error *err)
{
    (void)c;
    (void)step;
    return wsync__rdma_no(err, "the controller");
}
WSYNC_DEF void wsync_controller_step_times(const wsync_controller *c, double *transfer_s, double *commit_s)
{
    (void)c;
    if (transfer_s) *transfer_s = 0;
    if (commit_s) *commit_s = 0;
}
WSYNC_DEF void wsync_controller_step_tasks(const wsync_controller *c, uint64_t *tasks, uint64_t *bytes)
{
    (void)c;
    if (tasks) *tasks = 0;
    if (bytes) *bytes = 0;
}
WSYNC_DEF unsigned wsync_controller_refused(const wsync_controller *c, char *last, size_t cap)
{
    (void)c;
    if (last && cap) last[0] = 0;
    return 0;
}
WSYNC_DEF void wsync_controller_close(wsync_controller *c)
{
    (void)c;
}
WSYNC_DEF wsync_result wsync_rank_join(const wsync_rank_options *opt, wsync_rank **out, wsync_error *err)
{
    (void)opt;
    if (out) *out = NULL;
    return wsync__rdma_no(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_wait_go(wsync_rank *r, uint64_t *step, int *bye, int timeout_ms, wsync_error *err)
{
    (void)r;
    (void)step;
    (void)bye;
    (void)timeout_ms;
    return wsync__rdma_no(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_select(wsync_rank *r, const char *const *names, uint32_t n, wsync_error *err)
{
    (void)r;
    (void)names;
    (void)n;
    return wsync__rdma_no(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_push(wsync_rank *r, wsync_error *err)
{
    (void)r;
    return wsync__rdma_no(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_push_some(wsync_rank *r, uint32_t first, uint32_t count, int flush,
                                            wsync_error *err)
{
    (void)r;
    (void)first;
    (void)count;
    (void)flush;
    return wsync__rdma_no(err, "a rank");
}
WSYNC_DEF wsync_result wsync_rank_done(wsync_rank *r, uint64_t step, wsync_result result, const char *why,
                                       wsync_error *err)
{
    (void)r;
    (void)step;
    (void)result;
    (void)why;
    return wsync__rdma_no(err, "a rank");
}
WSYNC_DEF const wsync_ctl_transfer *wsync_rank_transfers(const wsync_rank *r, uint32_t *n)
{
    (void)r;
    if (n) *n = 0;
    return NULL;
}
WSYNC_DEF void wsync_rank_push_stats(const wsync_rank *r, wsync_exec_stats *out)
{
    (void)r;
    if (out) memset(out, 0, sizeof *out);
}
WSYNC_DEF void wsync_rank_sparse_stats(const wsync_rank *r, wsync_sparse_stats *out)
{
    (void)r;
    if (out) memset(out, 0, sizeof *out);
}
WSYNC_DEF void wsync_rank_sparse_reset(wsync_rank *r)
{
    (void)r;
}
WSYNC_DEF uint64_t wsync_rank_version(const wsync_rank *r)
{
    (void)r;
    return 0;
}
WSYNC_DEF const volatile uint64_t *wsync_rank_version_word(const wsync_rank *r)
{
    (void)r;
    return NULL;
}
WSYNC_DEF wsync_result wsync_rank_wait_version(wsync_rank *r, uint64_t step, int timeout_ms, wsync_error *err)
{
    (void)r;
    (void)step;
    (void)timeout_ms;
    return wsync__rdma_no(err, "a rank");
}
WSYNC_DEF int wsync_rank_ended(wsync_rank *r, char *why, size_t cap)
{
    (void)r;
    if (why && cap) snprintf(why, cap, "%s", "not built with the controller");
    return 1;
}
WSYNC_DEF void wsync_rank_close(wsync_rank *r)
{
    (void)r;
}

#endif /* WSYNC__RDMA_OK */

/* ======================================================================
   IMPLEMENTATION: the planner and its simulator  >>planner
   ======================================================================
   Pure computation: no fabric, socket or thread; it builds everywhere
   (outside WSYNC__RDMA_OK) and uses of the rest of this header only the
   allocator helpers from the common section (wsync__rdma_alloc,
   wsync__rdma_free) and wsync.h's wsync_error_set. It can be
   read on its own. */

#define WSYNC__PL_HUGE ((size_t)4 << 20)

/* An array of WSYNC__PL_HUGE bytes or more from the default allocator:
   ask for huge pages over its 2 MB-aligned interior (a hint; it does
   something on Linux with transparent huge pages in "madvise" or "always"
   mode), one page fault for each 2 MB. The first touch of the 4 KB pages
   of Kimi-K2's plan was a third of its planning time on a virtual machine. */
static void *wsync__pl_huge(const wsync_allocator *a, void *p, size_t bytes)
{
#if WSYNC__RDMA_OK && defined(MADV_HUGEPAGE)
    uintptr_t lo, hi;
    const uintptr_t H = (uintptr_t)2 << 20;
    if (p && !a->alloc && bytes >= WSYNC__PL_HUGE) {
        lo = ((uintptr_t)p + H - 1) & ~(H - 1);
        hi = ((uintptr_t)p + bytes) & ~(H - 1);
        if (hi > lo) (void)madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
    }
#else
    (void)a;
    (void)bytes;
#endif
    return p;
}

/* Not zeroed: for arrays every element of which is written before it is
   read (the planner's big ones: zeroing them touched every page twice). */
static void *wsync__plalloc_raw(const wsync_allocator *a, uint64_t n, size_t size)
{
    uint64_t bytes;
    if (!wsync_mul_u64(n ? n : 1, size, &bytes) || bytes > (uint64_t)SIZE_MAX) return NULL;
    return wsync__pl_huge(a, a->alloc ? a->alloc(a->user, (size_t)bytes) : WSYNC_RDMA_MALLOC((size_t)bytes),
                          (size_t)bytes);
}

/* Zeroed memory; n * size overflow-checked. */
static void *wsync__plalloc(const wsync_allocator *a, uint64_t n, size_t size)
{
    uint64_t bytes;
    void *p;
    if (!wsync_mul_u64(n ? n : 1, size, &bytes) || bytes > (uint64_t)SIZE_MAX) return NULL;
    if ((p = wsync__plalloc_raw(a, n, size)) != NULL) memset(p, 0, (size_t)bytes);
    return p;
}

/* Grows *arr to hold at least n + 1 elements (doubling); the new elements
   are not zeroed (the callers write each one as they append it). */
static int wsync__plgrow(const wsync_allocator *a, void **arr, uint64_t *cap, uint64_t n, size_t size)
{
    uint64_t nc;
    void *q;
    if (n < *cap) return 1;
    nc = *cap ? *cap * 2 : 64;
    if (nc <= n) nc = n + 1;
    q = wsync__plalloc_raw(a, nc, size);
    if (!q) return 0;
    if (*arr) memcpy(q, *arr, (size_t)(*cap * size));
    wsync__rdma_free(a, *arr);
    *arr = q;
    *cap = nc;
    return 1;
}

static uint64_t wsync__pldiv_up(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

/* Stable LSD radix sort of idx by key (key[i] belongs to idx[i]), 8 bits a
   pass; a pass whose bytes are all equal is skipped. tidx/tkey: scratch. */
static void wsync__plrsort(uint32_t *idx, uint32_t *key, uint32_t *tidx, uint32_t *tkey, uint64_t n)
{
    unsigned shift;
    uint64_t i;
    for (shift = 0; shift < 32; shift += 8) {
        uint64_t cnt[256], pos = 0;
        unsigned b;
        memset(cnt, 0, sizeof cnt);
        for (i = 0; i < n; i++) cnt[(key[i] >> shift) & 255u]++;
        for (b = 0; b < 256; b++)
            if (cnt[b] == n) break;
        if (b < 256) continue;
        for (b = 0; b < 256; b++) {
            uint64_t c = cnt[b];
            cnt[b] = pos;
            pos += c;
        }
        for (i = 0; i < n; i++) {
            uint64_t d = cnt[(key[i] >> shift) & 255u]++;
            tidx[d] = idx[i];
            tkey[d] = key[i];
        }
        memcpy(idx, tidx, (size_t)n * sizeof *idx);
        memcpy(key, tkey, (size_t)n * sizeof *key);
    }
}

/* idx (4n words: idx, then wsync__plrsort's keys and scratch) gets 0..n-1
   in the order of v, stable: a sort by v's low 32 bits, then its high. */
static void wsync__plrsort64(uint32_t *idx, const uint64_t *v, uint64_t n)
{
    uint32_t *key = idx + n, *tidx = key + n, *tkey = tidx + n;
    uint64_t i;
    for (i = 0; i < n; i++) {
        idx[i] = (uint32_t)i;
        key[i] = (uint32_t)(v[i] & 0xFFFFFFFFu);
    }
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = (uint32_t)(v[idx[i]] >> 32);
    wsync__plrsort(idx, key, tidx, tkey, n);
}

/* ---- models ---------------------------------------------------------- */

enum {
    WSYNC__PLK_EMBED, WSYNC__PLK_NORM, WSYNC__PLK_LM_HEAD,
    WSYNC__PLK_IN_NORM, WSYNC__PLK_POST_NORM,
    WSYNC__PLK_Q, WSYNC__PLK_K, WSYNC__PLK_V, WSYNC__PLK_Q_BIAS, WSYNC__PLK_K_BIAS, WSYNC__PLK_V_BIAS,
    WSYNC__PLK_O, WSYNC__PLK_Q_NORM, WSYNC__PLK_K_NORM,
    WSYNC__PLK_GATE, WSYNC__PLK_UP, WSYNC__PLK_DOWN,
    WSYNC__PLK_Q_A, WSYNC__PLK_Q_A_NORM, WSYNC__PLK_Q_B, WSYNC__PLK_KV_A, WSYNC__PLK_KV_A_NORM, WSYNC__PLK_KV_B,
    WSYNC__PLK_MLA_O,
    WSYNC__PLK_ROUTER, WSYNC__PLK_ROUTER_BIAS, WSYNC__PLK_SH_GATE, WSYNC__PLK_SH_UP, WSYNC__PLK_SH_DOWN,
    WSYNC__PLK_EX_GATE, WSYNC__PLK_EX_UP, WSYNC__PLK_EX_DOWN,
    WSYNC__PLK_COUNT
};

static const char *const wsync__plk_name[WSYNC__PLK_COUNT] = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate.weight", "mlp.gate.e_score_correction_bias", "mlp.shared_experts.gate_proj.weight",
    "mlp.shared_experts.up_proj.weight", "mlp.shared_experts.down_proj.weight",
    "gate_proj.weight", "up_proj.weight", "down_proj.weight"};

static const wsync_plan_model wsync__pl_models[] = {
    /* name, arch, vocab, hidden, layers, inter, heads, kv_heads, head_dim, qk_norm, qkv_bias, tied,
       dense_layers, experts, shared, moe_inter, q_lora, kv_lora, qk_nope, qk_rope, v_head, fp8 */
    {"qwen3-0.6b", WSYNC_PLAN_ARCH_QWEN, 151936, 1024, 28, 3072, 16, 8, 128, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen2.5-7b", WSYNC_PLAN_ARCH_QWEN, 152064, 3584, 28, 18944, 28, 4, 128, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"kimi-k2", WSYNC_PLAN_ARCH_MLA, 163840, 7168, 61, 18432, 64, 64, 0, 0, 0, 0, 1, 384, 1, 2048, 1536, 512, 128,
     64, 128, 1},
};

WSYNC_DEF wsync_result wsync_plan_model_lookup(const char *name, wsync_plan_model *out, wsync_error *err)
{
    size_t i;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!name || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan model: NULL argument");
    for (i = 0; i < sizeof wsync__pl_models / sizeof wsync__pl_models[0]; i++)
        if (strcmp(wsync__pl_models[i].name, name) == 0) {
            *out = wsync__pl_models[i];
            return WSYNC_OK;
        }
    return wsync_error_set(err, WSYNC_ERR_NOT_FOUND, "plan model '%.100s': not one of qwen3-0.6b, qwen2.5-7b, kimi-k2",
                         name);
}

static int wsync__pl_moe_layer(const wsync_plan_model *m, uint64_t l)
{
    return m->arch == WSYNC_PLAN_ARCH_MLA && m->experts > 0 && l >= m->dense_layers;
}

/* The fixed (non-routed-expert) tensor kinds of a layer, in checkpoint order. */
static unsigned wsync__pl_layer_kinds(const wsync_plan_model *m, uint64_t l, unsigned *k)
{
    unsigned n = 0;
    k[n++] = WSYNC__PLK_IN_NORM;
    if (m->arch == WSYNC_PLAN_ARCH_QWEN) {
        k[n++] = WSYNC__PLK_Q;
        if (m->qkv_bias) k[n++] = WSYNC__PLK_Q_BIAS;
        k[n++] = WSYNC__PLK_K;
        if (m->qkv_bias) k[n++] = WSYNC__PLK_K_BIAS;
        k[n++] = WSYNC__PLK_V;
        if (m->qkv_bias) k[n++] = WSYNC__PLK_V_BIAS;
        k[n++] = WSYNC__PLK_O;
        if (m->qk_norm) {
            k[n++] = WSYNC__PLK_Q_NORM;
            k[n++] = WSYNC__PLK_K_NORM;
        }
    } else {
        k[n++] = WSYNC__PLK_Q_A;
        k[n++] = WSYNC__PLK_Q_A_NORM;
        k[n++] = WSYNC__PLK_Q_B;
        k[n++] = WSYNC__PLK_KV_A;
        k[n++] = WSYNC__PLK_KV_A_NORM;
        k[n++] = WSYNC__PLK_KV_B;
        k[n++] = WSYNC__PLK_MLA_O;
    }
    k[n++] = WSYNC__PLK_POST_NORM;
    if (wsync__pl_moe_layer(m, l)) {
        k[n++] = WSYNC__PLK_ROUTER;
        k[n++] = WSYNC__PLK_ROUTER_BIAS;
        if (m->shared_experts) {
            k[n++] = WSYNC__PLK_SH_GATE;
            k[n++] = WSYNC__PLK_SH_UP;
            k[n++] = WSYNC__PLK_SH_DOWN;
        }
    } else {
        k[n++] = WSYNC__PLK_GATE;
        k[n++] = WSYNC__PLK_UP;
        k[n++] = WSYNC__PLK_DOWN;
    }
    return n;
}

static uint64_t wsync__pl_layer_tensors(const wsync_plan_model *m, uint64_t l)
{
    unsigned k[32];
    return wsync__pl_layer_kinds(m, l, k) + (wsync__pl_moe_layer(m, l) ? 3 * m->experts : 0);
}

/* Index of a layer's first tensor (the embedding is tensor 0): the first
   nd layers have the dense layer's count of tensors, the rest the MoE's. */
static uint64_t wsync__pl_layer_base(const wsync_plan_model *m, uint64_t l)
{
    uint64_t nd = m->layers, cd, cm;
    if (m->arch == WSYNC_PLAN_ARCH_MLA && m->experts > 0) nd = m->dense_layers < m->layers ? m->dense_layers : m->layers;
    cd = nd > 0 ? wsync__pl_layer_tensors(m, 0) : 0;
    cm = nd < m->layers ? wsync__pl_layer_tensors(m, nd) : 0;
    return 1 + (l < nd ? l : nd) * cd + (l > nd ? (l - nd) * cm : 0);
}

static void wsync__pl_shape(const wsync_plan_model *m, unsigned kind, uint64_t *rows, uint64_t *cols)
{
    uint64_t h = m->hidden, q = m->heads * m->head_dim, kv = m->kv_heads * m->head_dim, r = h, c = 1;
    uint64_t sh = m->moe_inter * (m->shared_experts ? m->shared_experts : 1);
    switch (kind) {
    case WSYNC__PLK_EMBED: case WSYNC__PLK_LM_HEAD: r = m->vocab; c = h; break;
    case WSYNC__PLK_NORM: case WSYNC__PLK_IN_NORM: case WSYNC__PLK_POST_NORM: r = h; break;
    case WSYNC__PLK_Q: r = q; c = h; break;
    case WSYNC__PLK_K: case WSYNC__PLK_V: r = kv; c = h; break;
    case WSYNC__PLK_Q_BIAS: r = q; break;
    case WSYNC__PLK_K_BIAS: case WSYNC__PLK_V_BIAS: r = kv; break;
    case WSYNC__PLK_O: r = h; c = q; break;
    case WSYNC__PLK_Q_NORM: case WSYNC__PLK_K_NORM: r = m->head_dim; break;
    case WSYNC__PLK_GATE: case WSYNC__PLK_UP: r = m->inter; c = h; break;
    case WSYNC__PLK_DOWN: r = h; c = m->inter; break;
    case WSYNC__PLK_Q_A: r = m->q_lora; c = h; break;
    case WSYNC__PLK_Q_A_NORM: r = m->q_lora; break;
    case WSYNC__PLK_Q_B: r = m->heads * (m->qk_nope + m->qk_rope); c = m->q_lora; break;
    case WSYNC__PLK_KV_A: r = m->kv_lora + m->qk_rope; c = h; break;
    case WSYNC__PLK_KV_A_NORM: r = m->kv_lora; break;
    case WSYNC__PLK_KV_B: r = m->heads * (m->qk_nope + m->v_head); c = m->kv_lora; break;
    case WSYNC__PLK_MLA_O: r = h; c = m->heads * m->v_head; break;
    case WSYNC__PLK_ROUTER: r = m->experts; c = h; break;
    case WSYNC__PLK_ROUTER_BIAS: r = m->experts; break;
    case WSYNC__PLK_SH_GATE: case WSYNC__PLK_SH_UP: r = sh; c = h; break;
    case WSYNC__PLK_SH_DOWN: r = h; c = sh; break;
    case WSYNC__PLK_EX_GATE: case WSYNC__PLK_EX_UP: r = m->moe_inter; c = h; break;
    case WSYNC__PLK_EX_DOWN: r = h; c = m->moe_inter; break;
    default: break;
    }
    *rows = r;
    *cols = c;
}

WSYNC_DEF uint64_t wsync_plan_model_tensors(const wsync_plan_model *m)
{
    return wsync__pl_layer_base(m, m->layers) + 1 + (m->tied ? 0 : 1);
}

/* kind, layer and expert of tensor `index` (index < wsync_plan_model_tensors). */
static void wsync__pl_locate(const wsync_plan_model *m, uint64_t index, unsigned *kind, uint64_t *layer,
                             uint64_t *expert)
{
    uint64_t end = wsync__pl_layer_base(m, m->layers), lo = 0, hi = m->layers, l, off;
    unsigned k[32], n;
    *layer = UINT64_MAX;
    *expert = UINT64_MAX;
    if (index == 0) {
        *kind = WSYNC__PLK_EMBED;
        return;
    }
    if (index >= end) {
        *kind = index == end ? WSYNC__PLK_NORM : WSYNC__PLK_LM_HEAD;
        return;
    }
    while (hi - lo > 1) { /* the last layer whose base <= index */
        uint64_t mid = lo + (hi - lo) / 2;
        if (wsync__pl_layer_base(m, mid) <= index) lo = mid;
        else hi = mid;
    }
    l = lo;
    off = index - wsync__pl_layer_base(m, l);
    n = wsync__pl_layer_kinds(m, l, k);
    *layer = l;
    if (off < n) {
        *kind = k[off];
        return;
    }
    off -= n;
    *expert = off / 3;
    *kind = WSYNC__PLK_EX_GATE + (unsigned)(off % 3);
}

WSYNC_DEF wsync_result wsync_plan_model_tensor(const wsync_plan_model *m, uint64_t index,
                                               wsync_plan_tensor_info *out, wsync_error *err)
{
    unsigned kind;
    uint64_t layer, expert;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!m || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan model tensor: NULL argument");
    if (index >= wsync_plan_model_tensors(m))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan model %.60s: tensor %llu of %llu", m->name,
                             (unsigned long long)index, (unsigned long long)wsync_plan_model_tensors(m));
    wsync__pl_locate(m, index, &kind, &layer, &expert);
    memset(out, 0, sizeof *out);
    wsync__pl_shape(m, kind, &out->rows, &out->cols);
    out->ndim = out->cols == 1 ? 1 : 2;
    out->kind = kind;
    out->layer = layer == UINT64_MAX ? UINT32_MAX : (uint32_t)layer;
    out->expert = expert == UINT64_MAX ? UINT32_MAX : (uint32_t)expert;
    if (layer == UINT64_MAX) snprintf(out->name, sizeof out->name, "%.60s", wsync__plk_name[kind]);
    else if (expert == UINT64_MAX)
        snprintf(out->name, sizeof out->name, "model.layers.%u.%.60s", (unsigned)layer, wsync__plk_name[kind]);
    else
        snprintf(out->name, sizeof out->name, "model.layers.%u.mlp.experts.%u.%.30s", (unsigned)layer,
                 (unsigned)expert, wsync__plk_name[kind]);
    return WSYNC_OK;
}

WSYNC_DEF uint64_t wsync_plan_model_params(const wsync_plan_model *m)
{
    uint64_t total = 0, l, r, c;
    unsigned k[32], n, i;
    wsync__pl_shape(m, WSYNC__PLK_EMBED, &r, &c);
    total += r * c * (m->tied ? 1 : 2);
    wsync__pl_shape(m, WSYNC__PLK_NORM, &r, &c);
    total += r * c;
    for (l = 0; l < m->layers; l++) {
        n = wsync__pl_layer_kinds(m, l, k);
        for (i = 0; i < n; i++) {
            wsync__pl_shape(m, k[i], &r, &c);
            total += r * c;
        }
        if (wsync__pl_moe_layer(m, l))
            for (i = WSYNC__PLK_EX_GATE; i <= WSYNC__PLK_EX_DOWN; i++) {
                wsync__pl_shape(m, i, &r, &c);
                total += r * c * m->experts;
            }
    }
    return total;
}

/* ---- model layouts >>plan-models -------------------------------------- */

typedef struct wsync__pl_lay {
    const wsync_plan_model *m;
    wsync_allocator a;
    uint32_t P, R, fp8;
    wsync_plan_source *src;
    uint64_t n_src;
    wsync_plan_piece *pieces;
    uint64_t n_pieces, cap_pieces;
    wsync_plan_dest *dests;
    uint64_t n_dests, cap_dests;
    wsync_plan_unit *units;
    uint64_t n_units, cap_units;
    uint64_t *cur;   /* per inference rank: next free byte of region 0, of region 1 */
} wsync__pl_lay;

/* One part of a (possibly fused) destination tensor: a source tensor, how
   many ways it is split, and along which dimension. */
typedef struct wsync__pl_part {
    uint64_t src, ways;
} wsync__pl_part;

/* Largest divisor of P that divides n (n = 0: 1). */
static uint64_t wsync__pl_ways(uint64_t P, uint64_t n)
{
    uint64_t d;
    for (d = P; d > 1; d--)
        if (P % d == 0 && n % d == 0) return d;
    return 1;
}

static uint64_t wsync__pl_gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Split ways of rows (or columns) n that come in `unit`-sized groups (heads),
   also whole 128-blocks when quantized. */
static uint64_t wsync__pl_split(const wsync__pl_lay *L, uint64_t n, uint64_t unit, int quant)
{
    uint64_t u = unit ? unit : 1;
    if (quant) u = u / wsync__pl_gcd(u, WSYNC_PLAN_BLOCK) * WSYNC_PLAN_BLOCK;
    if (n % u) return 1;
    return wsync__pl_ways(L->P, n / u);
}

static uint64_t wsync__pl_align(uint64_t x) { return (x + 255u) & ~(uint64_t)255u; }

/* Appends a destination: inference rank `rank`, the unit's buffer at
   offset in region 0, its scales at scale_offset in region 1. */
static wsync_result wsync__pl_dest(wsync__pl_lay *L, uint64_t rank, uint64_t offset, uint64_t scale_offset,
                                   wsync_error *err)
{
    wsync_plan_dest *d;
    if (!wsync__plgrow(&L->a, (void **)&L->dests, &L->cap_dests, L->n_dests, sizeof *L->dests))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: destinations");
    d = &L->dests[L->n_dests++];
    d->rank = (uint32_t)rank;
    d->region = 0;
    d->offset = offset;
    d->scale_region = 1;
    d->scale_offset = scale_offset;
    return WSYNC_OK;
}

/* Appends a unit: the pieces from first_piece and the destinations from
   first_dest on, both appended already. */
static wsync_result wsync__pl_unit_add(wsync__pl_lay *L, uint64_t first_piece, uint64_t first_dest, uint32_t dtype,
                                       wsync_error *err)
{
    wsync_plan_unit *u;
    if (!wsync__plgrow(&L->a, (void **)&L->units, &L->cap_units, L->n_units, sizeof *L->units))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: units");
    u = &L->units[L->n_units++];
    u->first_piece = first_piece;
    u->n_pieces = L->n_pieces - first_piece;
    u->first_dest = first_dest;
    u->n_dests = L->n_dests - first_dest;
    u->dtype = dtype;
    return WSYNC_OK;
}

/* Appends a unit whose pieces are already appended from first_piece; its
   destinations: local rank p of every replica, at that rank's cursors. */
static wsync_result wsync__pl_unit(wsync__pl_lay *L, uint64_t first_piece, uint32_t dtype, uint64_t p_lo,
                                   uint64_t p_hi, wsync_error *err)
{
    uint64_t rows = 0, cols = L->pieces[first_piece].cols, i, p, j, out, scales = 0, first_dest = L->n_dests;
    wsync_result r;
    for (i = first_piece; i < L->n_pieces; i++) rows += L->pieces[i].rows;
    out = rows * cols * (dtype == WSYNC_DTYPE_F8_E4M3 ? 1u : 2u);
    if (dtype == WSYNC_DTYPE_F8_E4M3)
        scales = wsync__pldiv_up(rows, WSYNC_PLAN_BLOCK) * wsync__pldiv_up(cols, WSYNC_PLAN_BLOCK) * 4u;
    for (p = p_lo; p < p_hi; p++)
        for (j = 0; j < L->R; j++) {
            uint64_t rank = j * L->P + p;
            if ((r = wsync__pl_dest(L, rank, L->cur[2 * rank], L->cur[2 * rank + 1], err)) != WSYNC_OK) return r;
            L->cur[2 * rank] += wsync__pl_align(out);
            L->cur[2 * rank + 1] += wsync__pl_align(scales);
        }
    return wsync__pl_unit_add(L, first_piece, first_dest, dtype, err);
}

static wsync_result wsync__pl_piece(wsync__pl_lay *L, uint64_t src, uint64_t r0, uint64_t nr, uint64_t c0,
                                    uint64_t nc, wsync_error *err)
{
    wsync_plan_piece *pc;
    if (!wsync__plgrow(&L->a, (void **)&L->pieces, &L->cap_pieces, L->n_pieces, sizeof *L->pieces))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: pieces");
    pc = &L->pieces[L->n_pieces++];
    pc->source = (uint32_t)src;
    pc->row0 = r0;
    pc->rows = nr;
    pc->col0 = c0;
    pc->cols = nc;
    return WSYNC_OK;
}

/* A destination tensor made of parts, each split parts[i].ways ways by rows
   (col = 0: the slices concatenated) or one part by columns (col = 1):
   local rank p takes slice p / (P / ways) of each part. Ranks with the same
   slices share one unit. */
static wsync_result wsync__pl_emit(wsync__pl_lay *L, const wsync__pl_part *parts, unsigned n, int col,
                                   uint32_t dtype, wsync_error *err)
{
    uint64_t p, lo = 0;
    unsigned i;
    wsync_result r;
    for (p = 0; p <= L->P; p++) {
        int same = p > 0 && p < L->P;
        for (i = 0; i < n && same; i++) {
            uint64_t g = L->P / parts[i].ways;
            same = p / g == (p - 1) / g;
        }
        if (same) continue;
        if (p > 0) { /* local ranks [lo, p) share their slices */
            uint64_t first = L->n_pieces;
            for (i = 0; i < n; i++) {
                const wsync_plan_source *s = &L->src[parts[i].src];
                uint64_t k = lo / (L->P / parts[i].ways);
                if (col)
                    r = wsync__pl_piece(L, parts[i].src, 0, s->rows, k * (s->cols / parts[i].ways),
                                        s->cols / parts[i].ways, err);
                else
                    r = wsync__pl_piece(L, parts[i].src, k * (s->rows / parts[i].ways), s->rows / parts[i].ways, 0,
                                        s->cols, err);
                if (r != WSYNC_OK) return r;
            }
            if ((r = wsync__pl_unit(L, first, dtype, lo, p, err)) != WSYNC_OK) return r;
        }
        lo = p;
    }
    return WSYNC_OK;
}

static wsync_result wsync__pl_emit1(wsync__pl_lay *L, uint64_t src, uint64_t ways, int col, uint32_t dtype,
                                    wsync_error *err)
{
    wsync__pl_part part;
    part.src = src;
    part.ways = ways;
    return wsync__pl_emit(L, &part, 1, col, dtype, err);
}

/* Routed experts of layer l: whole, expert e on local rank e % P at slot e / P. */
static wsync_result wsync__pl_experts(wsync__pl_lay *L, uint64_t l, uint64_t base, uint32_t dtype, wsync_error *err)
{
    const wsync_plan_model *m = L->m;
    uint64_t e, j, p, E = m->experts, I = (uint64_t)L->P * L->R;
    uint64_t eb = dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : 2;
    uint64_t w13 = 2 * m->moe_inter * m->hidden * eb, w2 = m->hidden * m->moe_inter * eb, s13 = 0, s2 = 0;
    uint64_t *b = L->cur + 2 * I; /* scratch after the cursors: 4 per rank */
    wsync_result r;
    (void)l;
    if (dtype == WSYNC_DTYPE_F8_E4M3) {
        s13 = wsync__pldiv_up(2 * m->moe_inter, WSYNC_PLAN_BLOCK) * wsync__pldiv_up(m->hidden, WSYNC_PLAN_BLOCK) * 4;
        s2 = wsync__pldiv_up(m->hidden, WSYNC_PLAN_BLOCK) * wsync__pldiv_up(m->moe_inter, WSYNC_PLAN_BLOCK) * 4;
    }
    for (j = 0; j < I; j++) { /* experts.w13_weight, w2_weight and their scales, each rank */
        uint64_t local = E / L->P + (j % L->P < E % L->P);
        b[4 * j] = L->cur[2 * j];
        L->cur[2 * j] += wsync__pl_align(local * w13);
        b[4 * j + 1] = L->cur[2 * j];
        L->cur[2 * j] += wsync__pl_align(local * w2);
        b[4 * j + 2] = L->cur[2 * j + 1];
        L->cur[2 * j + 1] += wsync__pl_align(local * s13);
        b[4 * j + 3] = L->cur[2 * j + 1];
        L->cur[2 * j + 1] += wsync__pl_align(local * s2);
    }
    for (e = 0; e < E; e++) {
        uint64_t src = base + 3 * e, slot = e / L->P, w;
        p = e % L->P;
        for (w = 0; w < 2; w++) {
            uint64_t first = L->n_pieces, first_dest = L->n_dests;
            if (w == 0) {
                if ((r = wsync__pl_piece(L, src, 0, m->moe_inter, 0, m->hidden, err)) != WSYNC_OK) return r;
                if ((r = wsync__pl_piece(L, src + 1, 0, m->moe_inter, 0, m->hidden, err)) != WSYNC_OK) return r;
            } else if ((r = wsync__pl_piece(L, src + 2, 0, m->hidden, 0, m->moe_inter, err)) != WSYNC_OK)
                return r;
            for (j = 0; j < L->R; j++) {
                uint64_t rank = j * L->P + p;
                if ((r = wsync__pl_dest(L, rank, b[4 * rank + w] + slot * (w == 0 ? w13 : w2),
                                        b[4 * rank + 2 + w] + slot * (w == 0 ? s13 : s2), err)) != WSYNC_OK)
                    return r;
            }
            if ((r = wsync__pl_unit_add(L, first, first_dest, dtype, err)) != WSYNC_OK) return r;
        }
    }
    return WSYNC_OK;
}

/* The units of layer l (sources from index base). */
static wsync_result wsync__pl_layer(wsync__pl_lay *L, uint64_t l, wsync_error *err)
{
    const wsync_plan_model *m = L->m;
    uint64_t base = wsync__pl_layer_base(m, l), at[WSYNC__PLK_COUNT];
    unsigned k[32], n, i;
    uint32_t wq = L->fp8 ? WSYNC_DTYPE_F8_E4M3 : WSYNC_DTYPE_BF16, bf = WSYNC_DTYPE_BF16;
    int q8 = L->fp8 != 0;
    wsync__pl_part parts[3];
    wsync_result r;
    for (i = 0; i < WSYNC__PLK_COUNT; i++) at[i] = UINT64_MAX;
    n = wsync__pl_layer_kinds(m, l, k);
    for (i = 0; i < n; i++) at[k[i]] = base + i;
#define WSYNC__PL_TRY(x)                                                                                      \
    do {                                                                                                       \
        if ((r = (x)) != WSYNC_OK) return r;                                                                   \
    } while (0)
    WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_IN_NORM], 1, 0, bf, err));
    if (m->arch == WSYNC_PLAN_ARCH_QWEN) {
        uint64_t wq_ = wsync__pl_split(L, m->heads * m->head_dim, m->head_dim, q8);
        uint64_t wkv = wsync__pl_split(L, m->kv_heads * m->head_dim, m->head_dim, q8);
        parts[0].src = at[WSYNC__PLK_Q];
        parts[0].ways = wq_;
        parts[1].src = at[WSYNC__PLK_K];
        parts[1].ways = wkv;
        parts[2].src = at[WSYNC__PLK_V];
        parts[2].ways = wkv;
        WSYNC__PL_TRY(wsync__pl_emit(L, parts, 3, 0, wq, err)); /* qkv_proj */
        if (m->qkv_bias) {
            parts[0].src = at[WSYNC__PLK_Q_BIAS];
            parts[1].src = at[WSYNC__PLK_K_BIAS];
            parts[2].src = at[WSYNC__PLK_V_BIAS];
            WSYNC__PL_TRY(wsync__pl_emit(L, parts, 3, 0, bf, err)); /* qkv_proj.bias */
        }
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_O], wsync__pl_split(L, m->heads * m->head_dim, m->head_dim, q8),
                                      1, wq, err));
        if (m->qk_norm) {
            WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_Q_NORM], 1, 0, bf, err));
            WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_K_NORM], 1, 0, bf, err));
        }
    } else {
        parts[0].src = at[WSYNC__PLK_Q_A];
        parts[0].ways = 1;
        parts[1].src = at[WSYNC__PLK_KV_A];
        parts[1].ways = 1;
        WSYNC__PL_TRY(wsync__pl_emit(L, parts, 2, 0, wq, err)); /* fused_qkv_a_proj, replicated */
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_Q_A_NORM], 1, 0, bf, err));
        WSYNC__PL_TRY(wsync__pl_emit1(
            L, at[WSYNC__PLK_Q_B],
            wsync__pl_split(L, m->heads * (m->qk_nope + m->qk_rope), m->qk_nope + m->qk_rope, q8), 0, wq, err));
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_KV_A_NORM], 1, 0, bf, err));
        WSYNC__PL_TRY(wsync__pl_emit1(
            L, at[WSYNC__PLK_KV_B], wsync__pl_split(L, m->heads * (m->qk_nope + m->v_head), m->qk_nope + m->v_head, q8),
            0, wq, err));
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_MLA_O], wsync__pl_split(L, m->heads * m->v_head, m->v_head, q8),
                                      1, wq, err));
    }
    WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_POST_NORM], 1, 0, bf, err));
    if (wsync__pl_moe_layer(m, l)) {
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_ROUTER], 1, 0, bf, err));
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_ROUTER_BIAS], 1, 0, bf, err));
        if (m->shared_experts) {
            uint64_t sh = m->moe_inter * m->shared_experts, w = wsync__pl_split(L, sh, 1, q8);
            parts[0].src = at[WSYNC__PLK_SH_GATE];
            parts[0].ways = w;
            parts[1].src = at[WSYNC__PLK_SH_UP];
            parts[1].ways = w;
            WSYNC__PL_TRY(wsync__pl_emit(L, parts, 2, 0, wq, err)); /* shared_experts.gate_up_proj */
            WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_SH_DOWN], w, 1, wq, err));
        }
        WSYNC__PL_TRY(wsync__pl_experts(L, l, base + n, wq, err));
    } else {
        uint64_t w = wsync__pl_split(L, m->inter, 1, q8);
        parts[0].src = at[WSYNC__PLK_GATE];
        parts[0].ways = w;
        parts[1].src = at[WSYNC__PLK_UP];
        parts[1].ways = w;
        WSYNC__PL_TRY(wsync__pl_emit(L, parts, 2, 0, wq, err)); /* gate_up_proj */
        WSYNC__PL_TRY(wsync__pl_emit1(L, at[WSYNC__PLK_DOWN], w, 1, wq, err));
    }
    return WSYNC_OK;
}

static void wsync__pl_lay_release(wsync__pl_lay *L)
{
    wsync__rdma_free(&L->a, L->src);
    wsync__rdma_free(&L->a, L->pieces);
    wsync__rdma_free(&L->a, L->dests);
    wsync__rdma_free(&L->a, L->units);
    wsync__rdma_free(&L->a, L->cur);
}

WSYNC_DEF wsync_result wsync_plan_layout_model(const wsync_plan_model *m, const wsync_plan_layout_options *opt,
                                               wsync_plan_layout *out, wsync_error *err)
{
    wsync__pl_lay L;
    wsync_plan_mesh *meshes;
    uint64_t i, l, n, end, I;
    uint32_t R;
    wsync_result r = WSYNC_OK;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!m || !opt || !out)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan layout: NULL argument");
    memset(out, 0, sizeof *out);
    R = opt->replicas ? opt->replicas : 1;
    if (opt->n_trainers == 0 || opt->n_inference == 0 || opt->n_trainers > WSYNC_PLAN_MAX_RANKS ||
        opt->n_inference > WSYNC_PLAN_MAX_RANKS)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "plan layout: %u trainers, %u inference ranks (1 to %u each)",
                             opt->n_trainers, opt->n_inference, WSYNC_PLAN_MAX_RANKS);
    if (opt->n_inference % R)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                             "plan layout: %u inference ranks do not split into %u replicas", opt->n_inference, R);
    if (m->arch != WSYNC_PLAN_ARCH_QWEN && m->arch != WSYNC_PLAN_ARCH_MLA)
        return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "plan layout: model %.60s: unknown architecture", m->name);
    memset(&L, 0, sizeof L);
    L.m = m;
    L.a = opt->allocator;
    L.R = R;
    L.P = opt->n_inference / R;
    L.fp8 = opt->fp8;
    I = opt->n_inference;
    n = wsync_plan_model_tensors(m);
    L.n_src = n;
    L.src = (wsync_plan_source *)wsync__plalloc(&L.a, n, sizeof *L.src);
    L.cur = (uint64_t *)wsync__plalloc(&L.a, 6 * I, sizeof *L.cur);
    meshes = (wsync_plan_mesh *)wsync__plalloc(&L.a, 2, sizeof *meshes);
    if (!L.src || !L.cur || !meshes) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan layout: sources");
        goto fail;
    }
    for (i = 0; i < 2; i++) {
        meshes[i].first = 0;
        meshes[i].count = opt->n_trainers;
        meshes[i].group = opt->one_group ? 0 : (uint32_t)i;
        meshes[i].gather = opt->shards_only ? 0 : 1;
    }
    /* sources, one per model tensor, in model order */
    for (l = 0; l < m->layers; l++) {
        uint64_t b = wsync__pl_layer_base(m, l), e = wsync__pl_layer_base(m, l + 1), nf;
        unsigned k[32];
        nf = wsync__pl_layer_kinds(m, l, k);
        for (i = b; i < e; i++) {
            unsigned kind = i - b < nf ? k[i - b] : WSYNC__PLK_EX_GATE + (unsigned)((i - b - nf) % 3);
            wsync__pl_shape(m, kind, &L.src[i].rows, &L.src[i].cols);
            L.src[i].dtype = WSYNC_DTYPE_BF16;
            L.src[i].mesh = i - b < nf ? 0 : 1;
        }
    }
    end = wsync__pl_layer_base(m, m->layers);
    for (i = 0; i < n; i++)
        if (i == 0 || i >= end) {
            wsync__pl_shape(m, i == 0 ? WSYNC__PLK_EMBED : i == end ? WSYNC__PLK_NORM : WSYNC__PLK_LM_HEAD,
                            &L.src[i].rows, &L.src[i].cols);
            L.src[i].dtype = WSYNC_DTYPE_BF16;
        }
    /* units: the embedding, the layers, the final norm, lm_head (or the tied embedding) */
    if ((r = wsync__pl_emit1(&L, 0, wsync__pl_ways(L.P, m->vocab), 0, WSYNC_DTYPE_BF16, err)) != WSYNC_OK) goto fail;
    for (l = 0; l < m->layers; l++)
        if ((r = wsync__pl_layer(&L, l, err)) != WSYNC_OK) goto fail;
    if ((r = wsync__pl_emit1(&L, end, 1, 0, WSYNC_DTYPE_BF16, err)) != WSYNC_OK) goto fail;
    if (!m->tied &&
        (r = wsync__pl_emit1(&L, end + 1, wsync__pl_ways(L.P, m->vocab), 0, WSYNC_DTYPE_BF16, err)) != WSYNC_OK)
        goto fail;
    out->allocator = L.a;
    out->input.n_trainers = opt->n_trainers;
    out->input.n_inference = opt->n_inference;
    out->input.sources = L.src;
    out->input.n_sources = L.n_src;
    out->input.meshes = meshes;
    out->input.n_meshes = m->arch == WSYNC_PLAN_ARCH_MLA && m->experts ? 2 : 1;
    out->input.pieces = L.pieces;
    out->input.n_pieces = L.n_pieces;
    out->input.dests = L.dests;
    out->input.n_dests = L.n_dests;
    out->input.units = L.units;
    out->input.n_units = L.n_units;
    out->region_bytes = L.cur;
    out->storage_[0] = L.src;
    out->storage_[1] = meshes;
    out->storage_[2] = L.pieces;
    out->storage_[3] = L.dests;
    out->storage_[4] = L.units;
    return WSYNC_OK;
fail:
    wsync__rdma_free(&L.a, meshes);
    wsync__pl_lay_release(&L);
    memset(out, 0, sizeof *out);
    return r;
}

WSYNC_DEF void wsync_plan_layout_free(wsync_plan_layout *l)
{
    unsigned i;
    if (!l) return;
    for (i = 0; i < 5; i++) wsync__rdma_free(&l->allocator, l->storage_[i]);
    wsync__rdma_free(&l->allocator, l->region_bytes);
    memset(l, 0, sizeof *l);
}

/* ---- planner >>plan ---------------------------------------------------- */

/* The planner's one heap: a min-heap of (key, id), ties to the lower id, so
   every order it gives is deterministic. The assignment pass keys it by a
   rank's load in bytes; the ordering pass and the simulator by a time in
   seconds, as wsync__pl_tkey's order-keeping bits (times are never
   negative). */
typedef struct wsync__pl_hitem {
    uint64_t key;
    uint32_t id;
} wsync__pl_hitem;

typedef struct wsync__pl_heap {
    wsync__pl_hitem *v;
    uint64_t n;
} wsync__pl_heap;

static int wsync__pl_hless(const wsync__pl_hitem *a, const wsync__pl_hitem *b)
{
    return a->key < b->key || (a->key == b->key && a->id < b->id);
}

static void wsync__pl_hpush(wsync__pl_heap *h, uint64_t key, uint32_t id)
{
    uint64_t i = h->n++;
    wsync__pl_hitem x;
    x.key = key;
    x.id = id;
    while (i > 0) {
        uint64_t q = (i - 1) / 2;
        if (!wsync__pl_hless(&x, &h->v[q])) break;
        h->v[i] = h->v[q];
        i = q;
    }
    h->v[i] = x;
}

static wsync__pl_hitem wsync__pl_hpop(wsync__pl_heap *h)
{
    wsync__pl_hitem top = h->v[0], x = h->v[--h->n];
    uint64_t i = 0;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && wsync__pl_hless(&h->v[c + 1], &h->v[c])) c++;
        if (!wsync__pl_hless(&h->v[c], &x)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

/* A time as a heap key: the bits of a non-negative double order as the
   doubles do (0 and -0 both give 0). */
static uint64_t wsync__pl_tkey(double t)
{
    uint64_t u = 0;
    if (t > 0) memcpy(&u, &t, sizeof u);
    return u;
}

static double wsync__pl_tval(uint64_t key)
{
    double t;
    memcpy(&t, &key, sizeof t);
    return t;
}

/* Per-unit facts computed once. */
typedef struct wsync__pl_uinfo {
    uint64_t rows, cols, eb;      /* output rows, columns, bytes per output element */
    uint64_t out_bytes, scale_bytes, dest_bytes; /* whole unit; dest_bytes = out + scales */
    uint32_t mesh, group;
} wsync__pl_uinfo;

typedef struct wsync__pl_range {
    uint64_t lo, hi;
} wsync__pl_range;

typedef struct wsync__pl_b {
    const wsync_plan_input *in;
    const wsync_plan_options *o;
    wsync_plan *p;
    wsync__pl_uinfo *ui;
    uint64_t cap_preps, cap_pieces;
    uint64_t *gload;           /* per trainer rank: bytes in the current group */
    uint64_t *sg, *rg;         /* per NIC: bytes in the current group */
    wsync__pl_range *pd;       /* per preparation: its destinations [lo, hi) of the input's */
    uint64_t cap_pd;
    double speed;              /* preparation stage rate over line rate (ordering pass) */
    /* the ordering pass's state */
    double *rfree, *rrem, *gfree, *qfree, *ready;
    uint64_t *eng, n_eng;      /* per preparation: when it joined its rank's engines */
    uint64_t *run_lo, *run_hi, *srun, *nact;
    uint32_t *act;
    wsync__pl_hitem *heap;
} wsync__pl_b;

static wsync_result wsync__pl_check(const wsync_plan_input *in, wsync__pl_uinfo *ui, uint32_t *n_groups,
                                    wsync_error *err)
{
    uint64_t i, k;
    uint32_t g = 0;
    if (in->n_trainers == 0 || in->n_inference == 0 || in->n_trainers > WSYNC_PLAN_MAX_RANKS ||
        in->n_inference > WSYNC_PLAN_MAX_RANKS)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "plan: %u trainers, %u inference ranks (1 to %u each)",
                             in->n_trainers, in->n_inference, WSYNC_PLAN_MAX_RANKS);
    if ((in->n_sources && !in->sources) || (in->n_meshes && !in->meshes) || (in->n_pieces && !in->pieces) ||
        (in->n_dests && !in->dests) || (in->n_units && !in->units))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan: an array is NULL with a nonzero count");
    if (in->n_units >= UINT32_MAX || in->n_sources >= UINT32_MAX)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "%s", "plan: more than 2^32 units or sources");
    for (i = 0; i < in->n_meshes; i++) {
        const wsync_plan_mesh *m = &in->meshes[i];
        if (m->count == 0 || m->first >= in->n_trainers || m->count > in->n_trainers - m->first)
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: mesh %llu: ranks %u+%u outside %u trainers",
                                 (unsigned long long)i, m->first, m->count, in->n_trainers);
        if (m->group >= WSYNC_PLAN_MAX_GROUPS)
            return wsync_error_set(err, WSYNC_ERR_LIMIT, "plan: mesh %llu: group %u (at most %u groups)",
                                 (unsigned long long)i, m->group, WSYNC_PLAN_MAX_GROUPS);
        if (m->gather > 2)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "plan: mesh %llu: gather %u (0, 1 or 2)",
                                    (unsigned long long)i, m->gather);
        if (m->group + 1 > g) g = m->group + 1;
    }
    for (i = 0; i < in->n_sources; i++) {
        const wsync_plan_source *s = &in->sources[i];
        uint64_t b;
        if (s->mesh >= in->n_meshes)
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: source %llu: mesh %u of %u",
                                 (unsigned long long)i, s->mesh, in->n_meshes);
        if (s->dtype != WSYNC_DTYPE_BF16)
            return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "plan: source %llu: dtype %s (trainers hold bf16)",
                                 (unsigned long long)i, wsync_dtype_name((wsync_dtype)s->dtype));
        if (s->rows == 0 || s->cols == 0 || !wsync_mul_u64(s->rows, s->cols, &b) || !wsync_mul_u64(b, 2, &b))
            return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "plan: source %llu: %llu x %llu", (unsigned long long)i,
                                 (unsigned long long)s->rows, (unsigned long long)s->cols);
    }
    for (i = 0; i < in->n_pieces; i++) {
        const wsync_plan_piece *pc = &in->pieces[i];
        const wsync_plan_source *s;
        if (pc->source >= in->n_sources)
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: piece %llu: source %u of %llu",
                                 (unsigned long long)i, pc->source, (unsigned long long)in->n_sources);
        s = &in->sources[pc->source];
        if (pc->rows == 0 || pc->cols == 0 || pc->rows > s->rows || pc->row0 > s->rows - pc->rows ||
            pc->cols > s->cols || pc->col0 > s->cols - pc->cols)
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                 "plan: piece %llu: rows %llu+%llu, columns %llu+%llu outside source %u (%llu x %llu)",
                                 (unsigned long long)i, (unsigned long long)pc->row0, (unsigned long long)pc->rows,
                                 (unsigned long long)pc->col0, (unsigned long long)pc->cols, pc->source,
                                 (unsigned long long)s->rows, (unsigned long long)s->cols);
    }
    for (i = 0; i < in->n_dests; i++)
        if (in->dests[i].rank >= in->n_inference)
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan: destination %llu: rank %u of %u",
                                 (unsigned long long)i, in->dests[i].rank, in->n_inference);
    for (i = 0; i < in->n_units; i++) {
        const wsync_plan_unit *u = &in->units[i];
        wsync__pl_uinfo *x = &ui[i];
        uint64_t rows = 0, b;
        if (u->n_pieces == 0 || u->first_piece >= in->n_pieces || u->n_pieces > in->n_pieces - u->first_piece ||
            u->n_dests == 0 || u->first_dest >= in->n_dests || u->n_dests > in->n_dests - u->first_dest)
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS,
                                    "plan: unit %llu: pieces or destinations out of range", (unsigned long long)i);
        if (u->dtype != WSYNC_DTYPE_BF16 && u->dtype != WSYNC_DTYPE_F8_E4M3)
            return wsync_error_set(err, WSYNC_ERR_UNSUPPORTED, "plan: unit %llu: target dtype %s (BF16 or F8_E4M3)",
                                 (unsigned long long)i, wsync_dtype_name((wsync_dtype)u->dtype));
        x->cols = in->pieces[u->first_piece].cols;
        x->mesh = in->sources[in->pieces[u->first_piece].source].mesh;
        x->group = in->meshes[x->mesh].group;
        for (k = u->first_piece; k < u->first_piece + u->n_pieces; k++) {
            const wsync_plan_piece *pc = &in->pieces[k];
            if (pc->cols != x->cols)
                return wsync_error_set(err, WSYNC_ERR_SIZE_MISMATCH,
                                        "plan: unit %llu: pieces of %llu and %llu columns", (unsigned long long)i,
                                        (unsigned long long)x->cols, (unsigned long long)pc->cols);
            if (in->sources[pc->source].mesh != x->mesh)
                return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                        "plan: unit %llu: pieces from different meshes", (unsigned long long)i);
            if (!wsync_add_u64(rows, pc->rows, &rows))
                return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "plan: unit %llu: rows", (unsigned long long)i);
        }
        x->rows = rows;
        x->eb = u->dtype == WSYNC_DTYPE_F8_E4M3 ? 1 : 2;
        if (!wsync_mul_u64(rows, x->cols, &b) || !wsync_mul_u64(b, x->eb, &x->out_bytes))
            return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "plan: unit %llu: size", (unsigned long long)i);
        x->scale_bytes = 0;
        if (u->dtype == WSYNC_DTYPE_F8_E4M3 &&
            !wsync_mul_u64(wsync__pldiv_up(rows, WSYNC_PLAN_BLOCK), wsync__pldiv_up(x->cols, WSYNC_PLAN_BLOCK) * 4,
                           &x->scale_bytes))
            return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "plan: unit %llu: scales", (unsigned long long)i);
        if (!wsync_add_u64(x->out_bytes, x->scale_bytes, &x->dest_bytes) ||
            !wsync_mul_u64(x->dest_bytes, u->n_dests, &b))
            return wsync_error_set(err, WSYNC_ERR_OVERFLOW, "plan: unit %llu: bytes", (unsigned long long)i);
    }
    *n_groups = g ? g : 1;
    return WSYNC_OK;
}

/* Holder of row `row` of a source: FSDP2's torch.chunk layout. */
static uint32_t wsync__pl_holder(const wsync_plan_input *in, const wsync_plan_source *s, uint64_t row,
                                 uint64_t *shard_end)
{
    const wsync_plan_mesh *m = &in->meshes[s->mesh];
    uint64_t chunk = wsync__pldiv_up(s->rows, m->count), h = row / chunk;
    if (shard_end) *shard_end = (h + 1) * chunk < s->rows ? (h + 1) * chunk : s->rows;
    return m->first + (uint32_t)h;
}

/* Appends a preparation of rows [r0, r1) of unit u, with its pieces, and
   destinations [d_lo, d_hi) of the unit. rank: the sender, or UINT32_MAX
   to choose later. */
static wsync_result wsync__pl_add_prep(wsync__pl_b *B, uint64_t u, uint64_t r0, uint64_t r1, uint64_t d_lo,
                                       uint64_t d_hi, uint32_t rank, wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    const wsync_plan_unit *un = &in->units[u];
    const wsync__pl_uinfo *x = &B->ui[u];
    wsync_plan *p = B->p;
    wsync_plan_prep *pr;
    uint64_t k, o = 0;
    if (!wsync__plgrow(&p->allocator, (void **)&p->preps, &B->cap_preps, p->n_preps, sizeof *p->preps) ||
        !wsync__plgrow(&p->allocator, (void **)&B->pd, &B->cap_pd, p->n_preps, sizeof *B->pd))
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: preparations");
    pr = &p->preps[p->n_preps];
    memset(pr, 0, sizeof *pr);
    pr->rank = rank;
    pr->group = x->group;
    pr->dtype = un->dtype;
    pr->unit = u;
    pr->out_row0 = r0;
    pr->rows = r1 - r0;
    pr->cols = x->cols;
    pr->first_piece = p->n_pieces;
    for (k = un->first_piece; k < un->first_piece + un->n_pieces; k++) {
        const wsync_plan_piece *pc = &in->pieces[k];
        uint64_t a = r0 > o ? r0 : o, b = r1 < o + pc->rows ? r1 : o + pc->rows;
        if (a < b) {
            wsync_plan_piece *np;
            if (!wsync__plgrow(&p->allocator, (void **)&p->pieces, &B->cap_pieces, p->n_pieces, sizeof *p->pieces))
                return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: pieces");
            np = &p->pieces[p->n_pieces++];
            *np = *pc;
            np->row0 = pc->row0 + (a - o);
            np->rows = b - a;
        }
        o += pc->rows;
    }
    pr->n_pieces = p->n_pieces - pr->first_piece;
    pr->src_bytes = pr->rows * pr->cols * 2;
    pr->out_bytes = pr->rows * pr->cols * x->eb;
    if (un->dtype == WSYNC_DTYPE_F8_E4M3) {
        pr->flags |= WSYNC_PLAN_QUANT;
        pr->scale_bytes = wsync__pldiv_up(pr->rows, WSYNC_PLAN_BLOCK) * wsync__pldiv_up(pr->cols, WSYNC_PLAN_BLOCK) * 4;
    }
    if (pr->n_pieces > 1) pr->flags |= WSYNC_PLAN_FUSE;
    pr->n_tasks = (d_hi - d_lo) * (pr->scale_bytes ? 2 : 1);
    B->pd[p->n_preps].lo = d_lo;
    B->pd[p->n_preps].hi = d_hi;
    p->n_preps++;
    return WSYNC_OK;
}

/* Whether `rank` holds every row of the preparation's pieces, whole width. */
static int wsync__pl_holds(const wsync__pl_b *B, const wsync_plan_prep *pr, uint32_t rank)
{
    uint64_t k;
    for (k = pr->first_piece; k < pr->first_piece + pr->n_pieces; k++) {
        const wsync_plan_piece *pc = &B->p->pieces[k];
        const wsync_plan_source *s = &B->in->sources[pc->source];
        uint64_t end;
        const wsync_plan_mesh *m = &B->in->meshes[s->mesh];
        if (pc->cols != s->cols) return 0;
        if (m->gather == 2) { /* a replica: every rank of the mesh holds every row */
            if (rank < m->first || rank - m->first >= m->count) return 0;
            continue;
        }
        if (wsync__pl_holder(B->in, s, pc->row0, &end) != rank || pc->row0 + pc->rows > end) return 0;
    }
    return 1;
}

/* Source bytes a preparation copies (gather, fuse) before quantizing or
   sending: none when the holders' fetches wrote its rows into its buffer. */
static uint64_t wsync__pl_copied(const wsync_plan_prep *pr)
{
    if (pr->flags & WSYNC_PLAN_FETCH) return 0;
    return (pr->flags & (WSYNC_PLAN_GATHER | WSYNC_PLAN_FUSE)) ? pr->src_bytes : 0;
}

/* Whether a row-shard preparation at `rank` gathers rows other ranks hold
   (every piece from a row-shard mesh: those rows are fetched). */
static int wsync__pl_fetches_rows(const wsync__pl_b *B, const wsync_plan_prep *pr, uint32_t rank)
{
    uint64_t k;
    int foreign = 0;
    for (k = pr->first_piece; k < pr->first_piece + pr->n_pieces; k++) {
        const wsync_plan_piece *pc = &B->p->pieces[k];
        const wsync_plan_source *s = &B->in->sources[pc->source];
        uint64_t end;
        if (B->in->meshes[s->mesh].gather != 0) return 0;
        if (wsync__pl_holder(B->in, s, pc->row0, &end) != rank || pc->row0 + pc->rows > end) foreign = 1;
    }
    return foreign;
}

static void wsync__pl_set_temp(wsync_plan_prep *pr)
{
    pr->temp_bytes = 0;
    if (pr->flags & (WSYNC_PLAN_GATHER | WSYNC_PLAN_FUSE)) pr->temp_bytes += pr->src_bytes;
    if (pr->flags & WSYNC_PLAN_QUANT) pr->temp_bytes += pr->out_bytes + pr->scale_bytes;
}

/* Bytes a preparation puts on the wire, a task's start-up counted as bytes. */
static uint64_t wsync__pl_wire(const wsync__pl_b *B, uint64_t i)
{
    const wsync_plan_prep *pr = &B->p->preps[i];
    return (pr->out_bytes + pr->scale_bytes + (pr->scale_bytes ? 2 : 1) * B->o->task_cost_bytes) *
           (B->pd[i].hi - B->pd[i].lo);
}

/* Row-shard meshes: cut unit u where the holder changes (fp8: at block
   boundaries), each range sent by the holder of its first row. */
static wsync_result wsync__pl_cut_shards(wsync__pl_b *B, uint64_t u, wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    const wsync_plan_unit *un = &in->units[u];
    const wsync__pl_uinfo *x = &B->ui[u];
    uint64_t cur = 0;
    wsync_result r;
    while (cur < x->rows) {
        uint64_t k, o = 0, e = x->rows, send;
        const wsync_plan_piece *pc = NULL;
        uint32_t h;
        wsync_plan_prep *pr;
        for (k = un->first_piece; k < un->first_piece + un->n_pieces; k++) {
            pc = &in->pieces[k];
            if (cur < o + pc->rows) break;
            o += pc->rows;
        }
        h = wsync__pl_holder(in, &in->sources[pc->source], pc->row0 + (cur - o), &send);
        e = o + (send - pc->row0);
        if (e > o + pc->rows) e = o + pc->rows;
        if (un->dtype == WSYNC_DTYPE_F8_E4M3 && e < x->rows) {
            e = e / WSYNC_PLAN_BLOCK * WSYNC_PLAN_BLOCK;
            if (e <= cur) e = cur + WSYNC_PLAN_BLOCK;
            if (e > x->rows) e = x->rows;
        }
        if ((r = wsync__pl_add_prep(B, u, cur, e, un->first_dest, un->first_dest + un->n_dests, h, err)) != WSYNC_OK)
            return r;
        pr = &B->p->preps[B->p->n_preps - 1];
        if (!wsync__pl_holds(B, pr, h)) pr->flags |= WSYNC_PLAN_GATHER;
        if (wsync__pl_fetches_rows(B, pr, h)) pr->flags |= WSYNC_PLAN_FETCH;
        wsync__pl_set_temp(pr);
        cur = e;
    }
    return WSYNC_OK;
}

/* The receiver's (or sender's) least loaded NIC in this group, then overall. */
static uint32_t wsync__pl_nic(const uint64_t *g, const uint64_t *tot, uint64_t rank, uint32_t K)
{
    uint32_t best = 0, k;
    for (k = 1; k < K; k++) {
        uint64_t a = rank * K + k, b = rank * K + best;
        if (g[a] < g[b] || (g[a] == g[b] && tot[a] < tot[b])) best = k;
    }
    return best;
}

static wsync_result wsync__pl_assign(wsync__pl_b *B, uint64_t p_lo, uint64_t p_hi, wsync__pl_heap *heaps,
                                     wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    wsync_plan *p = B->p;
    uint64_t n = p_hi - p_lo, i, m;
    uint32_t *idx, *key, *tidx, *tkey;
    (void)err;
    if (n == 0) return WSYNC_OK;
    idx = (uint32_t *)wsync__plalloc(&p->allocator, 4 * n, sizeof *idx);
    if (!idx) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: sort");
    key = idx + n;
    tidx = key + n;
    tkey = tidx + n;
    /* largest first: by wire bytes descending, low 32 bits then high (stable:
       ties keep input order) */
    for (i = 0; i < n; i++) {
        idx[i] = (uint32_t)i;
        key[i] = ~(uint32_t)(wsync__pl_wire(B, p_lo + i) & 0xFFFFFFFFu);
    }
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = ~(uint32_t)(wsync__pl_wire(B, p_lo + idx[i]) >> 32);
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) {
        wsync_plan_prep *pr = &p->preps[p_lo + idx[i]];
        uint64_t w = wsync__pl_wire(B, p_lo + idx[i]);
        wsync__pl_heap *h;
        wsync__pl_hitem it;
        if (pr->rank != UINT32_MAX) { /* fixed sender (row shards) */
            B->gload[pr->rank] += w;
            continue;
        }
        m = in->sources[p->pieces[pr->first_piece].source].mesh;
        h = &heaps[m];
        for (;;) { /* lazily drop entries made stale by another mesh sharing the rank */
            it = wsync__pl_hpop(h);
            if (it.key == B->gload[it.id]) break;
            wsync__pl_hpush(h, B->gload[it.id], it.id);
        }
        pr->rank = it.id;
        B->gload[it.id] += w;
        wsync__pl_hpush(h, B->gload[it.id], it.id);
        if (!wsync__pl_holds(B, pr, it.id)) pr->flags |= WSYNC_PLAN_GATHER;
        wsync__pl_set_temp(pr);
    }
    wsync__rdma_free(&p->allocator, idx);
    return WSYNC_OK;
}

/* Tasks of preparations [p_lo, p_hi) (one group), NICs chosen, appended
   to p->tasks in creation order. */
static void wsync__pl_tasks(wsync__pl_b *B, uint64_t p_lo, uint64_t p_hi)
{
    const wsync_plan_input *in = B->in;
    wsync_plan *p = B->p;
    uint32_t K = p->nics_per_rank;
    uint64_t i, d;
    for (i = p_lo; i < p_hi; i++) {
        const wsync_plan_prep *pr = &p->preps[i];
        const wsync__pl_uinfo *x = &B->ui[pr->unit];
        for (d = B->pd[i].lo; d < B->pd[i].hi; d++) {
            const wsync_plan_dest *ds = &in->dests[d];
            uint32_t sn = wsync__pl_nic(B->sg, p->send_bytes, pr->rank, K);
            uint32_t rn = wsync__pl_nic(B->rg, p->recv_bytes, ds->rank, K);
            uint64_t s = (uint64_t)pr->rank * K + sn, r = (uint64_t)ds->rank * K + rn;
            wsync_plan_task *t = &p->tasks[p->n_tasks++];
            memset(t, 0, sizeof *t);
            t->prep = (uint32_t)i;
            t->flags = 0;
            t->start = 0; /* the ordering pass's, set when sorted */
            t->group = pr->group;
            t->src_rank = pr->rank;
            t->src_nic = sn;
            t->dst_rank = ds->rank;
            t->dst_nic = rn;
            t->region = ds->region;
            t->src_offset = 0;
            t->dst_offset = ds->offset + pr->out_row0 * x->cols * x->eb;
            t->len = pr->out_bytes;
            B->sg[s] += t->len;
            B->rg[r] += t->len;
            p->send_bytes[s] += t->len;
            p->recv_bytes[r] += t->len;
            if (pr->scale_bytes) {
                wsync_plan_task *c = &p->tasks[p->n_tasks++];
                *c = *t;
                c->flags = WSYNC_PLAN_SCALES;
                c->region = ds->scale_region;
                c->src_offset = pr->out_bytes;
                c->dst_offset = ds->scale_offset + pr->out_row0 / WSYNC_PLAN_BLOCK *
                                                       wsync__pldiv_up(x->cols, WSYNC_PLAN_BLOCK) * 4;
                c->len = pr->scale_bytes;
                B->sg[s] += c->len;
                B->rg[r] += c->len;
                p->send_bytes[s] += c->len;
                p->recv_bytes[r] += c->len;
            }
        }
    }
}

/* When preparation q would be ready if its rank's engines took it next:
   gather/fuse then quantize, two pipelined stages that run ahead of the
   sends in the order preparations are first needed (as the simulator
   replays them). Times in bytes at line rate. */
static double wsync__pl_ready(const wsync__pl_b *B, const double *gfree, const double *qfree, const double *ready,
                              uint32_t q)
{
    const wsync_plan_prep *pr = &B->p->preps[q];
    double g = 0, u = 0, ge;
    if (ready[q] >= 0) return ready[q];
    g = (double)wsync__pl_copied(pr) / B->speed;
    if (pr->flags & WSYNC_PLAN_QUANT) u = (double)pr->src_bytes / B->speed;
    ge = gfree[pr->rank] + g;
    return u > 0 ? (ge > qfree[pr->rank] ? ge : qfree[pr->rank]) + u : ge;
}

/* Orders tasks [t_lo, t_hi) (one group) by a list-scheduling pass of the
   simulator's model in bytes-at-line-rate time: whenever a sender NIC is
   free it takes, of its remaining tasks (the first of each receiver NIC,
   in creation order), the one that can start earliest (its receiver NIC
   free, its preparation done), ties to the receiver with the most bytes
   still to come (the receivers are the critical resources), then the
   lower NIC. v[] gets each task's start, the order's key. A FIFO replay
   then finds no head-of-line blocking the pass did not already see. */
static wsync_result wsync__pl_order(wsync__pl_b *B, uint64_t t_lo, uint64_t t_hi, uint64_t *v, uint32_t *scratch,
                                    wsync_error *err)
{
    wsync_plan *p = B->p;
    uint32_t K = p->nics_per_rank;
    uint64_t S = (uint64_t)p->n_trainers * K, D = (uint64_t)p->n_inference * K, n = 0, i, nruns = 0;
    uint32_t *idx = scratch, *key, *tidx, *tkey;
    double cost = (double)B->o->task_cost_bytes;
    double *rfree = B->rfree, *rrem = B->rrem, *gfree = B->gfree, *qfree = B->qfree, *ready = B->ready;
    uint64_t *rs = B->run_lo, *re = B->run_hi, *srun = B->srun; /* runs; per sender NIC: its runs */
    uint32_t *act = B->act;                 /* per sender NIC: active runs, compacted */
    uint64_t *nact = B->nact;
    wsync__pl_heap heap;
    heap.v = B->heap;
    heap.n = 0;
    for (i = t_lo; i < t_hi; i++)
        if (!(p->tasks[i].flags & WSYNC_PLAN_SCALES)) idx[n++] = (uint32_t)(i - t_lo);
    key = idx + n;
    tidx = key + n;
    tkey = tidx + n;
#define WSYNC__PL_T(j) (&p->tasks[t_lo + (j)])
#define WSYNC__PL_SN(t) ((uint64_t)(t)->src_rank * K + (t)->src_nic)
#define WSYNC__PL_RN(t) ((uint64_t)(t)->dst_rank * K + (t)->dst_nic)
#define WSYNC__PL_LEN(j) ((double)WSYNC__PL_T(j)->len + cost + \
                          (t_lo + (j) + 1 < t_hi && (WSYNC__PL_T((j) + 1)->flags & WSYNC_PLAN_SCALES) \
                               ? (double)WSYNC__PL_T((j) + 1)->len + cost : 0.0))
    (void)err;
    for (i = 0; i < n; i++) key[i] = (uint32_t)WSYNC__PL_RN(WSYNC__PL_T(idx[i]));
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = (uint32_t)WSYNC__PL_SN(WSYNC__PL_T(idx[i]));
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < D; i++) {
        rfree[i] = 0;
        rrem[i] = 0;
    }
    for (i = 0; i < p->n_trainers; i++) gfree[i] = qfree[i] = 0;
    for (i = 0; i < S; i++) nact[i] = 0;
    /* runs of equal (sender NIC, receiver NIC); srun[s] = its first run */
    for (i = 0; i < n; i++) {
        const wsync_plan_task *t = WSYNC__PL_T(idx[i]);
        rrem[WSYNC__PL_RN(t)] += WSYNC__PL_LEN(idx[i]);
        ready[t->prep] = -1;
        if (i == 0 || WSYNC__PL_SN(WSYNC__PL_T(idx[i - 1])) != WSYNC__PL_SN(t) ||
            WSYNC__PL_RN(WSYNC__PL_T(idx[i - 1])) != WSYNC__PL_RN(t)) {
            uint64_t sn = WSYNC__PL_SN(t);
            if (nact[sn] == 0) srun[sn] = nruns;
            rs[nruns] = i;
            re[nruns] = i + 1;
            act[nruns] = (uint32_t)nruns;
            nact[sn]++;
            nruns++;
        } else
            re[nruns - 1] = i + 1;
    }
    for (i = 0; i < S; i++)
        if (nact[i]) wsync__pl_hpush(&heap, 0, (uint32_t)i);
    while (heap.n > 0) {
        wsync__pl_hitem h = wsync__pl_hpop(&heap);
        double h_t = wsync__pl_tval(h.key);
        uint64_t sn = h.id, k, best = UINT64_MAX, j;
        double bstart = 0, brem = 0, end;
        const wsync_plan_task *t;
        for (k = 0; k < nact[sn]; k++) {
            uint64_t run = act[srun[sn] + k];
            const wsync_plan_task *c = WSYNC__PL_T(idx[rs[run]]);
            uint64_t rn = WSYNC__PL_RN(c);
            double st = h_t, rd = wsync__pl_ready(B, gfree, qfree, ready, c->prep);
            if (rfree[rn] > st) st = rfree[rn];
            if (rd > st) st = rd;
            if (best == UINT64_MAX || st < bstart ||
                (st == bstart && (rrem[rn] > brem ||
                                  (rrem[rn] == brem && rn < WSYNC__PL_RN(WSYNC__PL_T(idx[rs[act[srun[sn] + best]]])))))) {
                best = k;
                bstart = st;
                brem = rrem[rn];
            }
        }
        {
            uint64_t run = act[srun[sn] + best];
            j = idx[rs[run]];
            t = WSYNC__PL_T(j);
            if (ready[t->prep] < 0) { /* the preparation joins its rank's engines now */
                const wsync_plan_prep *pr = &p->preps[t->prep];
                double g = (double)wsync__pl_copied(pr) / B->speed;
                double u = (pr->flags & WSYNC_PLAN_QUANT) ? (double)pr->src_bytes / B->speed : 0;
                double ge = gfree[pr->rank] + g;
                ready[t->prep] = u > 0 ? (ge > qfree[pr->rank] ? ge : qfree[pr->rank]) + u : ge;
                gfree[pr->rank] = ge;
                if (u > 0) qfree[pr->rank] = ready[t->prep];
                B->eng[t->prep] = B->n_eng++;
            }
            if (ready[t->prep] > h_t && ready[t->prep] > rfree[WSYNC__PL_RN(t)]) {
                /* waiting for the preparation: reserving the receiver now would
                   leave it a gap that a first-come-first-served receiver fills
                   with someone else's write; decide again once it is ready */
                wsync__pl_hpush(&heap, wsync__pl_tkey(ready[t->prep]), (uint32_t)sn);
                continue;
            }
            end = bstart + WSYNC__PL_LEN(j);
            rfree[WSYNC__PL_RN(t)] = end;
            rrem[WSYNC__PL_RN(t)] -= WSYNC__PL_LEN(j);
            v[t_lo + j] = (uint64_t)bstart;
            if (t_lo + j + 1 < t_hi && (WSYNC__PL_T(j + 1)->flags & WSYNC_PLAN_SCALES))
                v[t_lo + j + 1] = (uint64_t)bstart; /* the scales right after their data */
            if (++rs[run] == re[run]) { /* run done: drop it from the sender's active list */
                act[srun[sn] + best] = act[srun[sn] + nact[sn] - 1];
                nact[sn]--;
            }
        }
        if (nact[sn]) wsync__pl_hpush(&heap, wsync__pl_tkey(end), (uint32_t)sn);
    }
#undef WSYNC__PL_T
#undef WSYNC__PL_SN
#undef WSYNC__PL_RN
#undef WSYNC__PL_LEN
    return WSYNC_OK;
}

/* Final order: by rank, group, virtual time, creation (stable radix passes),
   the tasks then moved in place along the permutation's cycles: a second
   array of them (56 MB for Kimi-K2) cost its page faults; on a guest where
   a fresh page takes 15 us, planning Kimi-K2 took 12-20% less without it
   and without the separate pass that renumbered the preparations. */
static wsync_result wsync__pl_sort_all(wsync_plan *p, const uint64_t *v, const uint32_t *prep_map, wsync_error *err)
{
    uint64_t n = p->n_tasks, i;
    uint32_t *idx, *key, *tidx, *tkey;
    idx = (uint32_t *)wsync__plalloc_raw(&p->allocator, 4 * n, sizeof *idx);
    if (!idx) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: ordering");
    key = idx + n;
    tidx = key + n;
    tkey = tidx + n;
    wsync__plrsort64(idx, v, n);
    for (i = 0; i < n; i++) key[i] = p->tasks[idx[i]].group;
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) key[i] = p->tasks[idx[i]].src_rank;
    wsync__plrsort(idx, key, tidx, tkey, n);
    for (i = 0; i < n; i++) { /* the start, and the preparation's new index (wsync__pl_sort_preps) */
        p->tasks[i].start = v[i];
        p->tasks[i].prep = prep_map[p->tasks[i].prep];
    }
    for (i = 0; i < n; i++) { /* tasks[i] = old tasks[idx[i]]; idx[j] = j marks j placed */
        uint64_t j = i;
        wsync_plan_task keep;
        if (idx[i] == i) continue;
        keep = p->tasks[i];
        while (idx[j] != i) {
            uint64_t k = idx[j];
            p->tasks[j] = p->tasks[k];
            idx[j] = (uint32_t)j;
            j = k;
        }
        p->tasks[j] = keep;
        idx[j] = (uint32_t)j;
    }
    wsync__rdma_free(&p->allocator, idx);
    return WSYNC_OK;
}

/* Preparations in the order they join their rank's engines (the ordering
   pass's), so that a rank prepares in increasing index order; *map (n_preps
   words, the caller's to free) gets each old index's new one, which
   wsync__pl_sort_all writes into the tasks in its own pass over them. */
static wsync_result wsync__pl_sort_preps(wsync_plan *p, const uint64_t *eng, uint32_t **map, wsync_error *err)
{
    uint64_t n = p->n_preps, i;
    uint32_t *idx;
    wsync_plan_prep *np;
    idx = (uint32_t *)wsync__plalloc_raw(&p->allocator, 4 * n, sizeof *idx);
    np = (wsync_plan_prep *)wsync__plalloc_raw(&p->allocator, n, sizeof *np);
    *map = (uint32_t *)wsync__plalloc_raw(&p->allocator, n, sizeof **map);
    if (!idx || !np || !*map) {
        wsync__rdma_free(&p->allocator, idx);
        wsync__rdma_free(&p->allocator, np);
        wsync__rdma_free(&p->allocator, *map);
        *map = NULL;
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: ordering preparations");
    }
    wsync__plrsort64(idx, eng, n);
    for (i = 0; i < n; i++) {
        np[i] = p->preps[idx[i]];
        (*map)[idx[i]] = (uint32_t)i; /* old index -> new */
    }
    wsync__rdma_free(&p->allocator, p->preps);
    p->preps = np;
    wsync__rdma_free(&p->allocator, idx);
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_plan_reindex(wsync_plan *p, wsync_error *err)
{
    uint64_t i, K;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!p) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan reindex: NULL plan");
    K = p->nics_per_rank;
    memset(p->send_bytes, 0, (size_t)(p->n_trainers * K) * sizeof *p->send_bytes);
    memset(p->recv_bytes, 0, (size_t)(p->n_inference * K) * sizeof *p->recv_bytes);
    memset(p->rank_first, 0, (size_t)(p->n_trainers + 1) * sizeof *p->rank_first);
    for (i = 0; i < p->n_tasks; i++) {
        const wsync_plan_task *t = &p->tasks[i];
        if (t->src_rank >= p->n_trainers || t->dst_rank >= p->n_inference || t->src_nic >= K || t->dst_nic >= K ||
            t->prep >= p->n_preps)
            return wsync_error_set(err, WSYNC_ERR_OUT_OF_BOUNDS, "plan reindex: task %llu out of range",
                                 (unsigned long long)i);
        if (i > 0 && t->src_rank < p->tasks[i - 1].src_rank)
            return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "plan reindex: task %llu: ranks not in order",
                                 (unsigned long long)i);
        p->send_bytes[t->src_rank * K + t->src_nic] += t->len;
        p->recv_bytes[t->dst_rank * K + t->dst_nic] += t->len;
        p->rank_first[t->src_rank + 1]++;
    }
    for (i = 0; i < p->n_trainers; i++) p->rank_first[i + 1] += p->rank_first[i];
    return WSYNC_OK;
}

/* The fetches of FETCH preparations: per piece, one for each holder's run
   of its rows (the preparing rank's own rows too: the gather writes every
   row into the buffer). Ordered by holder, then the gatherer's rank
   counted from the holder's (holder h writes to h, h + 1, ..., h - 1
   modulo T: at any moment the holders write to different gatherers,
   where an order by gatherer would queue them all at the first one), then
   preparation, piece and row; the NICs of both sides, in that order, the
   least loaded by fetch bytes so far. */
static wsync_result wsync__pl_fetches(wsync__pl_b *B, wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    wsync_plan *p = B->p;
    uint32_t K = p->nics_per_rank, T = p->n_trainers;
    uint64_t NS = (uint64_t)T * K, i, k, n, cap = 0;
    uint64_t *fs = NULL, *fr;
    uint32_t *idx = NULL;
    wsync_plan_fetch *sorted = NULL;
    wsync_result r = WSYNC_OK;
    for (i = 0; i < p->n_preps; i++) {
        const wsync_plan_prep *pr = &p->preps[i];
        uint64_t o = 0; /* the piece's first row in the buffer */
        if (!(pr->flags & WSYNC_PLAN_FETCH)) continue;
        for (k = pr->first_piece; k < pr->first_piece + pr->n_pieces; k++) {
            const wsync_plan_piece *pc = &p->pieces[k];
            const wsync_plan_source *s = &in->sources[pc->source];
            uint64_t row = pc->row0, end = pc->row0 + pc->rows;
            while (row < end) {
                uint64_t se;
                uint32_t h = wsync__pl_holder(in, s, row, &se);
                wsync_plan_fetch *f;
                if (se > end) se = end;
                if (p->n_fetches >= UINT32_MAX - 1)
                    return wsync_error_set(err, WSYNC_ERR_LIMIT, "%s", "plan: more than 2^32 fetches");
                if (!wsync__plgrow(&p->allocator, (void **)&p->fetches, &cap, p->n_fetches, sizeof *p->fetches))
                    return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: fetches");
                f = &p->fetches[p->n_fetches++];
                memset(f, 0, sizeof *f);
                f->prep = (uint32_t)i;
                f->holder = h;
                f->piece = k;
                f->row0 = row;
                f->rows = se - row;
                f->dst_offset = (o + (row - pc->row0)) * pr->cols * 2;
                f->len = f->rows * pc->cols * 2;
                row = se;
            }
            o += pc->rows;
        }
    }
    n = p->n_fetches;
    if (n == 0) return WSYNC_OK;
    idx = (uint32_t *)wsync__plalloc_raw(&p->allocator, 4 * n, sizeof *idx);
    sorted = (wsync_plan_fetch *)wsync__plalloc_raw(&p->allocator, n, sizeof *sorted);
    fs = (uint64_t *)wsync__plalloc(&p->allocator, 2 * NS, 8);
    if (!idx || !sorted || !fs) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: ordering fetches");
        goto out;
    }
    fr = fs + NS;
    /* stable radix sorts: by the distance to the gatherer, then by holder */
    for (i = 0; i < n; i++) {
        const wsync_plan_fetch *f = &p->fetches[i];
        idx[i] = (uint32_t)i;
        idx[n + i] = (uint32_t)(((uint64_t)p->preps[f->prep].rank + T - f->holder) % T);
    }
    wsync__plrsort(idx, idx + n, idx + 2 * n, idx + 3 * n, n);
    for (i = 0; i < n; i++) idx[n + i] = p->fetches[idx[i]].holder;
    wsync__plrsort(idx, idx + n, idx + 2 * n, idx + 3 * n, n);
    for (i = 0; i < n; i++) {
        wsync_plan_fetch *f = &sorted[i];
        *f = p->fetches[idx[i]];
        f->src_nic = wsync__pl_nic(fs, fs, f->holder, K);
        f->dst_nic = wsync__pl_nic(fr, fr, p->preps[f->prep].rank, K);
        fs[(uint64_t)f->holder * K + f->src_nic] += f->len;
        fr[(uint64_t)p->preps[f->prep].rank * K + f->dst_nic] += f->len;
    }
    wsync__rdma_free(&p->allocator, p->fetches);
    p->fetches = sorted;
    sorted = NULL;
out:
    wsync__rdma_free(&p->allocator, idx);
    wsync__rdma_free(&p->allocator, sorted);
    wsync__rdma_free(&p->allocator, fs);
    return r;
}

/* wsync_plan_build's phases. The options with their defaults filled in. */
static wsync_result wsync__pl_defaults(wsync_plan_options *o, wsync_error *err)
{
    if (!o->nics_per_rank) o->nics_per_rank = 1;
    if (!o->max_tasks) o->max_tasks = (uint64_t)1 << 26;
    if (!o->chunks_per_rank) o->chunks_per_rank = 8;
    if (!o->task_cost_bytes) o->task_cost_bytes = 250000;
    if (!(o->prep_speed > 0)) o->prep_speed = 13.0 / 8.0;
    if (o->nics_per_rank > WSYNC_PLAN_MAX_NICS)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "plan: %u NICs per rank (at most %u)", o->nics_per_rank,
                             WSYNC_PLAN_MAX_NICS);
    if (o->max_tasks >= UINT32_MAX) o->max_tasks = UINT32_MAX - 1; /* task indices are 32-bit in the sorts */
    return WSYNC_OK;
}

/* The per-rank and per-NIC loads, the plan's byte counts, and a heap per
   mesh (its ranks by load). */
static wsync_result wsync__pl_alloc_loads(wsync__pl_b *B, wsync__pl_heap **heaps_out, wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    const wsync_plan_options *o = B->o;
    const wsync_allocator *a = &o->allocator;
    wsync_plan *p = B->p;
    wsync__pl_heap *heaps;
    uint64_t i;
    B->gload = (uint64_t *)wsync__plalloc(a, in->n_trainers, sizeof *B->gload);
    B->sg = (uint64_t *)wsync__plalloc(a, (uint64_t)in->n_trainers * o->nics_per_rank, sizeof *B->sg);
    B->rg = (uint64_t *)wsync__plalloc(a, (uint64_t)in->n_inference * o->nics_per_rank, sizeof *B->rg);
    p->send_bytes = (uint64_t *)wsync__plalloc(a, (uint64_t)in->n_trainers * o->nics_per_rank, 8);
    p->recv_bytes = (uint64_t *)wsync__plalloc(a, (uint64_t)in->n_inference * o->nics_per_rank, 8);
    p->rank_first = (uint64_t *)wsync__plalloc(a, (uint64_t)in->n_trainers + 1, 8);
    *heaps_out = heaps = (wsync__pl_heap *)wsync__plalloc(a, in->n_meshes, sizeof *heaps);
    if (!B->gload || !B->sg || !B->rg || !p->send_bytes || !p->recv_bytes || !p->rank_first || !heaps)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: loads");
    for (i = 0; i < in->n_meshes; i++) {
        heaps[i].v = (wsync__pl_hitem *)wsync__plalloc(a, (uint64_t)in->meshes[i].count + 1, sizeof *heaps[i].v);
        if (!heaps[i].v) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: heaps");
    }
    return WSYNC_OK;
}

/* Preparations and their senders, group by group: a unit from row shards
   cut at the shards, one to gather in chunks of destinations (each at most
   a fraction of a rank's share), then each group's preparations assigned
   to the mesh's least loaded ranks. */
static wsync_result wsync__pl_preps(wsync__pl_b *B, wsync__pl_heap *heaps, uint32_t n_groups, wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    wsync_plan *p = B->p;
    uint64_t g, i;
    wsync_result r;
    for (g = 0; g < n_groups; g++) {
        uint64_t p_lo = p->n_preps, gbytes = 0, u;
        memset(B->gload, 0, (size_t)in->n_trainers * sizeof *B->gload);
        for (u = 0; u < in->n_units; u++)
            if (B->ui[u].group == g) gbytes += B->ui[u].dest_bytes * in->units[u].n_dests;
        for (u = 0; u < in->n_units; u++) {
            const wsync_plan_unit *un = &in->units[u];
            const wsync__pl_uinfo *x = &B->ui[u];
            const wsync_plan_mesh *m = &in->meshes[x->mesh];
            uint64_t target, per, nch, c, d0;
            if (x->group != g) continue;
            if (!m->gather) {
                if ((r = wsync__pl_cut_shards(B, u, err)) != WSYNC_OK) return r;
                continue;
            }
            target = gbytes / ((uint64_t)m->count * B->o->chunks_per_rank);
            per = x->dest_bytes ? target / x->dest_bytes : un->n_dests;
            if (per < 1) per = 1;
            nch = wsync__pldiv_up(un->n_dests, per);
            if (nch > m->count) nch = m->count;
            for (c = 0, d0 = 0; c < nch; c++) {
                uint64_t d1 = un->n_dests * (c + 1) / nch;
                r = wsync__pl_add_prep(B, u, 0, x->rows, un->first_dest + d0, un->first_dest + d1, UINT32_MAX, err);
                if (r != WSYNC_OK) return r;
                d0 = d1;
            }
        }
        for (i = 0; i < in->n_meshes; i++) {
            uint32_t k;
            heaps[i].n = 0;
            for (k = 0; k < in->meshes[i].count; k++) wsync__pl_hpush(&heaps[i], 0, in->meshes[i].first + k);
        }
        if ((r = wsync__pl_assign(B, p_lo, p->n_preps, heaps, err)) != WSYNC_OK) return r;
    }
    return WSYNC_OK;
}

/* The preparations' tasks counted against max_tasks. */
static wsync_result wsync__pl_count_tasks(const wsync_plan *p, uint64_t max_tasks, uint64_t *total, wsync_error *err)
{
    uint64_t i, n = 0;
    for (i = 0; i < p->n_preps; i++) {
        n += p->preps[i].n_tasks;
        if (n > max_tasks)
            return wsync_error_set(err, WSYNC_ERR_LIMIT, "plan: more than %llu tasks (%llu preparations so far)",
                                   (unsigned long long)max_tasks, (unsigned long long)i + 1);
    }
    if (p->n_preps >= UINT32_MAX)
        return wsync_error_set(err, WSYNC_ERR_LIMIT, "%s", "plan: more than 2^32 preparations");
    *total = n;
    return WSYNC_OK;
}

/* The tasks, their virtual starts (v) and the sorts' scratch, and the
   ordering pass's state. Written before read: every field of a task as it
   is made, each task's virtual start by the ordering pass, the scratch by
   its users. */
static wsync_result wsync__pl_alloc_tasks(wsync__pl_b *B, uint64_t total_tasks, uint64_t **v, uint32_t **scratch,
                                          wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    const wsync_allocator *a = &B->o->allocator;
    wsync_plan *p = B->p;
    uint64_t NS = (uint64_t)in->n_trainers * B->o->nics_per_rank, NR = (uint64_t)in->n_inference * B->o->nics_per_rank;
    p->tasks = (wsync_plan_task *)wsync__plalloc_raw(a, total_tasks, sizeof *p->tasks);
    *v = (uint64_t *)wsync__plalloc_raw(a, total_tasks, sizeof **v);
    *scratch = (uint32_t *)wsync__plalloc_raw(a, 5 * total_tasks + 1, sizeof **scratch);
    B->rfree = (double *)wsync__plalloc(a, 2 * NR, sizeof(double));
    B->gfree = (double *)wsync__plalloc(a, 2 * (uint64_t)in->n_trainers, sizeof(double));
    B->ready = (double *)wsync__plalloc(a, p->n_preps, sizeof(double));
    B->eng = (uint64_t *)wsync__plalloc(a, p->n_preps, 8);
    B->run_lo = (uint64_t *)wsync__plalloc(a, 2 * total_tasks + 2 * NS, 8);
    B->act = (uint32_t *)wsync__plalloc(a, total_tasks, 4);
    B->heap = (wsync__pl_hitem *)wsync__plalloc(a, NS, sizeof *B->heap);
    if (B->rfree) B->rrem = B->rfree + NR;
    if (B->gfree) B->qfree = B->gfree + in->n_trainers;
    if (B->run_lo) {
        B->run_hi = B->run_lo + total_tasks;
        B->srun = B->run_hi + total_tasks;
        B->nact = B->srun + NS;
    }
    if (!p->tasks || !*v || !*scratch || !B->rfree || !B->gfree || !B->ready || !B->eng || !B->run_lo || !B->act ||
        !B->heap)
        return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "plan: %llu tasks", (unsigned long long)total_tasks);
    return WSYNC_OK;
}

/* Tasks group by group (preparations are in group order), the NICs
   balanced per group, each group's tasks ordered. */
static wsync_result wsync__pl_tasks_by_group(wsync__pl_b *B, uint32_t n_groups, uint64_t *v, uint32_t *scratch,
                                             wsync_error *err)
{
    const wsync_plan_input *in = B->in;
    wsync_plan *p = B->p;
    uint64_t i = 0, g;
    wsync_result r;
    for (g = 0; g < n_groups; g++) {
        uint64_t j = i, t_lo;
        memset(B->sg, 0, (size_t)in->n_trainers * B->o->nics_per_rank * sizeof *B->sg);
        memset(B->rg, 0, (size_t)in->n_inference * B->o->nics_per_rank * sizeof *B->rg);
        while (j < p->n_preps && p->preps[j].group == g) j++;
        t_lo = p->n_tasks;
        wsync__pl_tasks(B, i, j);
        if ((r = wsync__pl_order(B, t_lo, p->n_tasks, v, scratch, err)) != WSYNC_OK) return r;
        i = j;
    }
    return WSYNC_OK;
}

WSYNC_DEF wsync_result wsync_plan_build(const wsync_plan_input *in, const wsync_plan_options *opt, wsync_plan **out,
                                        wsync_error *err)
{
    wsync_plan_options o;
    wsync__pl_b B;
    wsync_plan *p = NULL;
    wsync__pl_heap *heaps = NULL;
    uint64_t *v = NULL, i, total_tasks = 0;
    uint32_t *scratch = NULL, *prep_map = NULL, n_groups = 1;
    wsync_result r;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!in || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan: NULL argument");
    *out = NULL;
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if ((r = wsync__pl_defaults(&o, err)) != WSYNC_OK) return r;
    memset(&B, 0, sizeof B);
    B.in = in;
    B.o = &o;
    B.speed = o.prep_speed;
    p = (wsync_plan *)wsync__plalloc(&o.allocator, 1, sizeof *p);
    if (!p) return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan");
    p->allocator = o.allocator;
    B.p = p;
    p->nics_per_rank = o.nics_per_rank;
    p->n_trainers = in->n_trainers;
    p->n_inference = in->n_inference;
    B.ui = (wsync__pl_uinfo *)wsync__plalloc(&o.allocator, in->n_units, sizeof *B.ui);
    if (!B.ui) r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan: units");
    else if ((r = wsync__pl_check(in, B.ui, &n_groups, err)) == WSYNC_OK) {
        p->n_groups = n_groups;
        if ((r = wsync__pl_alloc_loads(&B, &heaps, err)) == WSYNC_OK &&
            (r = wsync__pl_preps(&B, heaps, n_groups, err)) == WSYNC_OK &&
            (r = wsync__pl_count_tasks(p, o.max_tasks, &total_tasks, err)) == WSYNC_OK &&
            (r = wsync__pl_alloc_tasks(&B, total_tasks, &v, &scratch, err)) == WSYNC_OK &&
            (r = wsync__pl_tasks_by_group(&B, n_groups, v, scratch, err)) == WSYNC_OK &&
            (r = wsync__pl_sort_preps(p, B.eng, &prep_map, err)) == WSYNC_OK &&
            (r = wsync__pl_sort_all(p, v, prep_map, err)) == WSYNC_OK && (r = wsync_plan_reindex(p, err)) == WSYNC_OK &&
            (r = wsync__pl_fetches(&B, err)) == WSYNC_OK) {
            *out = p;
            p = NULL;
        }
    }
    if (heaps)
        for (i = 0; i < in->n_meshes; i++) wsync__rdma_free(&o.allocator, heaps[i].v);
    wsync__rdma_free(&o.allocator, heaps);
    wsync__rdma_free(&o.allocator, B.ui);
    wsync__rdma_free(&o.allocator, B.gload);
    wsync__rdma_free(&o.allocator, B.sg);
    wsync__rdma_free(&o.allocator, B.rg);
    wsync__rdma_free(&o.allocator, B.pd);
    wsync__rdma_free(&o.allocator, B.rfree);
    wsync__rdma_free(&o.allocator, B.gfree);
    wsync__rdma_free(&o.allocator, B.ready);
    wsync__rdma_free(&o.allocator, B.eng);
    wsync__rdma_free(&o.allocator, B.run_lo);
    wsync__rdma_free(&o.allocator, B.act);
    wsync__rdma_free(&o.allocator, B.heap);
    wsync__rdma_free(&o.allocator, v);
    wsync__rdma_free(&o.allocator, scratch);
    wsync__rdma_free(&o.allocator, prep_map);
    if (p) wsync_plan_free(p);
    return r;
}

WSYNC_DEF void wsync_plan_free(wsync_plan *p)
{
    wsync_allocator a;
    if (!p) return;
    a = p->allocator;
    wsync__rdma_free(&a, p->preps);
    wsync__rdma_free(&a, p->pieces);
    wsync__rdma_free(&a, p->tasks);
    wsync__rdma_free(&a, p->rank_first);
    wsync__rdma_free(&a, p->send_bytes);
    wsync__rdma_free(&a, p->recv_bytes);
    wsync__rdma_free(&a, p->fetches);
    wsync__rdma_free(&a, p);
}

WSYNC_DEF void wsync_plan_stats_get(const wsync_plan *p, wsync_plan_stats *s)
{
    uint64_t i, ns, nr, sum;
    memset(s, 0, sizeof *s);
    if (!p) return;
    s->tasks = p->n_tasks;
    s->preps = p->n_preps;
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].flags & WSYNC_PLAN_SCALES) s->scale_tasks++;
    for (i = 0; i < p->n_preps; i++)
        if (p->preps[i].temp_bytes > s->temp_max) s->temp_max = p->preps[i].temp_bytes;
    s->fetches = p->n_fetches;
    for (i = 0; i < p->n_fetches; i++) s->fetch_bytes += p->fetches[i].len;
    ns = (uint64_t)p->n_trainers * p->nics_per_rank;
    nr = (uint64_t)p->n_inference * p->nics_per_rank;
    s->send_min = s->recv_min = UINT64_MAX;
    for (i = 0, sum = 0; i < ns; i++) {
        sum += p->send_bytes[i];
        if (p->send_bytes[i] > s->send_max) s->send_max = p->send_bytes[i];
        if (p->send_bytes[i] < s->send_min) s->send_min = p->send_bytes[i];
    }
    s->bytes = sum;
    s->send_mean = ns ? (double)sum / (double)ns : 0;
    for (i = 0, sum = 0; i < nr; i++) {
        sum += p->recv_bytes[i];
        if (p->recv_bytes[i] > s->recv_max) s->recv_max = p->recv_bytes[i];
        if (p->recv_bytes[i] < s->recv_min) s->recv_min = p->recv_bytes[i];
    }
    s->recv_mean = nr ? (double)sum / (double)nr : 0;
    s->imbalance_send = s->send_mean > 0 ? (double)s->send_max / s->send_mean : 1;
    s->imbalance_recv = s->recv_mean > 0 ? (double)s->recv_max / s->recv_mean : 1;
}

static void wsync__pl_d64(wsync_digest_state *d, uint64_t x)
{
    uint8_t b[8];
    unsigned i;
    for (i = 0; i < 8; i++) b[i] = (uint8_t)(x >> (8 * i));
    wsync_digest_update(d, b, 8);
}

WSYNC_DEF uint64_t wsync_plan_digest(const wsync_plan *p)
{
    wsync_digest_state d;
    uint64_t i;
    memset(&d, 0, sizeof d); /* the unused tail of its buffer, for gcc's flow analysis */
    wsync_digest_init(&d);
    if (!p) return wsync_digest_final(&d);
    wsync__pl_d64(&d, p->n_trainers);
    wsync__pl_d64(&d, p->n_inference);
    wsync__pl_d64(&d, p->nics_per_rank);
    wsync__pl_d64(&d, p->n_groups);
    for (i = 0; i < p->n_preps; i++) {
        const wsync_plan_prep *x = &p->preps[i];
        wsync__pl_d64(&d, x->rank);
        wsync__pl_d64(&d, x->group);
        wsync__pl_d64(&d, x->flags);
        wsync__pl_d64(&d, x->dtype);
        wsync__pl_d64(&d, x->unit);
        wsync__pl_d64(&d, x->out_row0);
        wsync__pl_d64(&d, x->rows);
        wsync__pl_d64(&d, x->cols);
        wsync__pl_d64(&d, x->first_piece);
        wsync__pl_d64(&d, x->n_pieces);
        wsync__pl_d64(&d, x->src_bytes);
        wsync__pl_d64(&d, x->out_bytes);
        wsync__pl_d64(&d, x->scale_bytes);
        wsync__pl_d64(&d, x->temp_bytes);
        wsync__pl_d64(&d, x->n_tasks);
    }
    for (i = 0; i < p->n_pieces; i++) {
        const wsync_plan_piece *x = &p->pieces[i];
        wsync__pl_d64(&d, x->source);
        wsync__pl_d64(&d, x->row0);
        wsync__pl_d64(&d, x->rows);
        wsync__pl_d64(&d, x->col0);
        wsync__pl_d64(&d, x->cols);
    }
    for (i = 0; i < p->n_tasks; i++) {
        const wsync_plan_task *x = &p->tasks[i];
        wsync__pl_d64(&d, (uint64_t)x->prep | (uint64_t)x->group << 32);
        wsync__pl_d64(&d, (uint64_t)x->src_rank | (uint64_t)x->src_nic << 32);
        wsync__pl_d64(&d, (uint64_t)x->dst_rank | (uint64_t)x->dst_nic << 32);
        wsync__pl_d64(&d, (uint64_t)x->region | (uint64_t)x->flags << 32);
        wsync__pl_d64(&d, x->src_offset);
        wsync__pl_d64(&d, x->dst_offset);
        wsync__pl_d64(&d, x->len);
        wsync__pl_d64(&d, x->start);
    }
    /* the fetches only where there are any: a plan without them digests as
       it did before they existed */
    for (i = 0; i < p->n_fetches; i++) {
        const wsync_plan_fetch *x = &p->fetches[i];
        wsync__pl_d64(&d, (uint64_t)x->prep | (uint64_t)x->holder << 32);
        wsync__pl_d64(&d, (uint64_t)x->src_nic | (uint64_t)x->dst_nic << 32);
        wsync__pl_d64(&d, x->piece);
        wsync__pl_d64(&d, x->row0);
        wsync__pl_d64(&d, x->rows);
        wsync__pl_d64(&d, x->dst_offset);
        wsync__pl_d64(&d, x->len);
    }
    return wsync_digest_final(&d);
}

/* ---- simulator >>simulator -------------------------------------------- */

enum { WSYNC__PLE_SEND = 1, WSYNC__PLE_DONE = 2, WSYNC__PLE_PREP = 3, WSYNC__PLE_GFREE = 4 };

typedef struct wsync__pl_ev {
    double t, w;          /* time; tie: since when the sender waits (first come, first served) */
    uint64_t seq;         /* last tie: insertion order, so the replay is deterministic */
    uint32_t type;
    uint32_t id;
} wsync__pl_ev;

typedef struct wsync__pl_sim {
    const wsync_plan *p;
    wsync_allocator a;
    double rate, copy, quant, task_s;
    double rrate;         /* a receiving NIC's rate; 0: receivers are no resource */
    double pace, t0;      /* pacing: planned starts' rate in bytes/s (0: none); the group's start */
    uint64_t wm;
    wsync__pl_ev *ev;
    uint64_t nev, capev, seq;
    /* per sender NIC */
    uint64_t *nic_first, *nic_next, *nic_end; /* into order[] */
    uint32_t *order;                          /* task indices of the group by sender NIC */
    double *sfree, *swait;
    uint8_t *pending;
    /* per receiver NIC */
    double *rfree;
    /* per rank */
    uint64_t *prep_first, *prep_next, *prep_end; /* into porder[] */
    uint32_t *porder;
    double *pfree, *pbusy, *qfree, *qbusy; /* gather engine, quantize engine */
    uint64_t *live;
    /* per preparation */
    uint8_t *ready;
    double *rtime;        /* when it became ready */
    uint64_t *left;
    double end;
    wsync_plan_sim_result *res;
} wsync__pl_sim;

static int wsync__pl_evless(const wsync__pl_ev *a, const wsync__pl_ev *b)
{
    if (a->t != b->t) return a->t < b->t;
    if (a->w != b->w) return a->w < b->w;
    return a->seq < b->seq;
}

static int wsync__pl_evpush(wsync__pl_sim *S, double t, double w, uint32_t type, uint32_t id)
{
    uint64_t i;
    wsync__pl_ev x;
    if (!wsync__plgrow(&S->a, (void **)&S->ev, &S->capev, S->nev, sizeof *S->ev)) return 0;
    x.t = t;
    x.w = w;
    x.seq = S->seq++;
    x.type = type;
    x.id = id;
    i = S->nev++;
    while (i > 0) {
        uint64_t q = (i - 1) / 2;
        if (!wsync__pl_evless(&x, &S->ev[q])) break;
        S->ev[i] = S->ev[q];
        i = q;
    }
    S->ev[i] = x;
    return 1;
}

static wsync__pl_ev wsync__pl_evpop(wsync__pl_sim *S)
{
    wsync__pl_ev top = S->ev[0], x = S->ev[--S->nev];
    uint64_t i = 0;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= S->nev) break;
        if (c + 1 < S->nev && wsync__pl_evless(&S->ev[c + 1], &S->ev[c])) c++;
        if (!wsync__pl_evless(&S->ev[c], &x)) break;
        S->ev[i] = S->ev[c];
        i = c;
    }
    if (S->nev) S->ev[i] = x;
    return top;
}

/* Starts the rank's next preparations while its gather engine is idle and
   the watermark allows (force: one, over the watermark). Gather/fuse and
   quantize are two pipelined stages: a preparation leaves the first for the
   second, which takes preparations in the same order. */
static int wsync__pl_try_prep(wsync__pl_sim *S, uint32_t r, double t, int force)
{
    while (S->pfree[r] <= t && S->prep_next[r] < S->prep_end[r]) {
        uint32_t q = S->porder[S->prep_next[r]];
        const wsync_plan_prep *pr = &S->p->preps[q];
        double g = 0, u = 0, ge, rd;
        if (!force && S->wm && S->live[r] > 0 && S->live[r] + pr->temp_bytes > S->wm) return 1;
        if (force) S->res->watermark_overruns++;
        force = 0;
        g = (double)wsync__pl_copied(pr) / S->copy;
        if (pr->flags & WSYNC_PLAN_QUANT) u = (double)pr->src_bytes / S->quant;
        ge = t + g;
        rd = ge;
        if (u > 0) {
            rd = (ge > S->qfree[r] ? ge : S->qfree[r]) + u;
            S->qfree[r] = rd;
        }
        S->pfree[r] = ge;
        S->pbusy[r] += g;
        S->qbusy[r] += u;
        S->live[r] += pr->temp_bytes;
        if (S->live[r] > S->res->peak_temp) S->res->peak_temp = S->live[r];
        S->prep_next[r]++;
        if (!wsync__pl_evpush(S, rd, 0, WSYNC__PLE_PREP, q)) return 0;
        if (ge > t) return wsync__pl_evpush(S, ge, 0, WSYNC__PLE_GFREE, r);
    }
    return 1;
}

static int wsync__pl_try_send(wsync__pl_sim *S, uint64_t sn, double t)
{
    const wsync_plan *p = S->p;
    const wsync_plan_task *tk;
    uint64_t rn;
    double d;
    if (S->sfree[sn] > t || S->pending[sn] || S->nic_next[sn] == S->nic_end[sn]) return 1;
    tk = &p->tasks[S->order[S->nic_next[sn]]];
    if (!S->ready[tk->prep]) return 1;
    if (S->pace > 0 && S->t0 + (double)tk->start / S->pace > t) { /* paced: not before its planned start */
        double at = S->t0 + (double)tk->start / S->pace;
        S->pending[sn] = 1;
        return wsync__pl_evpush(S, at, at, WSYNC__PLE_SEND, (uint32_t)sn);
    }
    rn = (uint64_t)tk->dst_rank * p->nics_per_rank + tk->dst_nic;
    if (S->rrate > 0 && S->rfree[rn] > t) {
        /* in line from when both the NIC and the preparation were ready */
        double w = S->swait[sn] > S->rtime[tk->prep] ? S->swait[sn] : S->rtime[tk->prep];
        S->pending[sn] = 1;
        return wsync__pl_evpush(S, S->rfree[rn], w, WSYNC__PLE_SEND, (uint32_t)sn);
    }
    d = S->task_s + (double)tk->len / (S->rrate > 0 && S->rrate < S->rate ? S->rrate : S->rate);
    S->sfree[sn] = t + d;
    if (S->rrate > 0) S->rfree[rn] = t + d;
    S->swait[sn] = t + d;
    S->nic_next[sn]++;
    return wsync__pl_evpush(S, t + d, 0, WSYNC__PLE_DONE, S->order[S->nic_next[sn] - 1]);
}

/* Counts in first[0, n) become the bounds of n lists laid end to end (a
   counting sort's starts): first and end of each, next at its first.
   Returns the counts' sum. */
static uint64_t wsync__pl_bounds(uint64_t *first, uint64_t *next, uint64_t *end, uint64_t n)
{
    uint64_t i, at = 0;
    for (i = 0; i < n; i++) {
        uint64_t c = first[i];
        first[i] = at;
        next[i] = at;
        at += c;
        end[i] = at;
    }
    return at;
}

/* One mesh group from time t0; S->end gets its last write's end. */
static wsync_result wsync__pl_sim_group(wsync__pl_sim *S, uint32_t g, double t0, wsync_error *err)
{
    const wsync_plan *p = S->p;
    uint32_t K = p->nics_per_rank, r;
    uint64_t NS = (uint64_t)p->n_trainers * K, NR = (uint64_t)p->n_inference * K, i, left = 0;
    /* sender NIC lists, in plan order */
    for (i = 0; i < NS; i++) S->nic_first[i] = 0;
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].group == g) S->nic_first[(uint64_t)p->tasks[i].src_rank * K + p->tasks[i].src_nic]++;
    wsync__pl_bounds(S->nic_first, S->nic_next, S->nic_end, NS);
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].group == g) {
            uint64_t sn = (uint64_t)p->tasks[i].src_rank * K + p->tasks[i].src_nic;
            S->order[S->nic_next[sn]++] = (uint32_t)i;
            left++;
        }
    /* preparations of each rank, in the order of their first task */
    for (r = 0; r < p->n_trainers; r++) S->prep_first[r] = 0;
    for (i = 0; i < p->n_preps; i++) {
        S->ready[i] = 0;
        S->left[i] = 0;
        if (p->preps[i].group == g) S->prep_first[p->preps[i].rank]++;
    }
    wsync__pl_bounds(S->prep_first, S->prep_next, S->prep_end, p->n_trainers);
    for (i = 0; i < p->n_tasks; i++)
        if (p->tasks[i].group == g) S->left[p->tasks[i].prep]++;
    for (i = 0; i < p->n_preps; i++) /* a rank prepares in index order */
        if (p->preps[i].group == g && S->left[i] > 0) S->porder[S->prep_next[p->preps[i].rank]++] = (uint32_t)i;
    for (r = 0; r < p->n_trainers; r++) {
        S->prep_end[r] = S->prep_next[r]; /* a preparation without tasks is never run */
        S->prep_next[r] = S->prep_first[r];
        S->pfree[r] = t0;
        S->qfree[r] = t0;
        S->live[r] = 0;
    }
    for (i = 0; i < NS; i++) {
        S->nic_next[i] = S->nic_first[i];
        S->sfree[i] = t0;
        S->swait[i] = t0;
        S->pending[i] = 0;
    }
    for (i = 0; i < NR; i++) S->rfree[i] = t0;
    S->end = t0;
    S->t0 = t0;
    S->nev = 0;
    for (r = 0; r < p->n_trainers; r++)
        if (!wsync__pl_try_prep(S, r, t0, 0)) goto oom;
    while (left > 0) {
        wsync__pl_ev e;
        if (S->nev == 0) { /* the watermark holds every rank: start one preparation anyway */
            int moved = 0;
            for (r = 0; r < p->n_trainers && !moved; r++)
                if (S->pfree[r] <= S->end && S->prep_next[r] < S->prep_end[r]) {
                    if (!wsync__pl_try_prep(S, r, S->end, 1)) goto oom;
                    moved = 1;
                }
            if (!moved)
                return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                                     "plan simulate: group %u: %llu tasks can never run (a task before its "
                                     "preparation's turn?)",
                                     g, (unsigned long long)left);
            continue;
        }
        e = wsync__pl_evpop(S);
        S->res->events++;
        if (e.type == WSYNC__PLE_SEND) {
            S->pending[e.id] = 0;
            if (!wsync__pl_try_send(S, e.id, e.t)) goto oom;
        } else if (e.type == WSYNC__PLE_GFREE) {
            if (!wsync__pl_try_prep(S, e.id, e.t, 0)) goto oom;
        } else if (e.type == WSYNC__PLE_PREP) {
            const wsync_plan_prep *pr = &p->preps[e.id];
            uint32_t k;
            S->ready[e.id] = 1;
            S->rtime[e.id] = e.t;
            for (k = 0; k < K; k++)
                if (!wsync__pl_try_send(S, (uint64_t)pr->rank * K + k, e.t)) goto oom;
            if (!wsync__pl_try_prep(S, pr->rank, e.t, 0)) goto oom;
        } else {
            const wsync_plan_task *tk = &p->tasks[e.id];
            const wsync_plan_prep *pr = &p->preps[tk->prep];
            left--;
            if (e.t > S->end) S->end = e.t;
            if (--S->left[tk->prep] == 0) {
                S->live[pr->rank] -= pr->temp_bytes;
                if (!wsync__pl_try_prep(S, pr->rank, e.t, 0)) goto oom;
            }
            if (!wsync__pl_try_send(S, (uint64_t)tk->src_rank * K + tk->src_nic, e.t)) goto oom;
        }
    }
    return WSYNC_OK;
oom:
    return wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan simulate: events");
}

/* Group g's sending NICs (S->pending as scratch). */
static uint64_t wsync__pl_senders(const wsync__pl_sim *S, uint32_t g)
{
    const wsync_plan *p = S->p;
    uint64_t NS = (uint64_t)p->n_trainers * p->nics_per_rank, i, senders = 0;
    for (i = 0; i < NS; i++) S->pending[i] = 0;
    for (i = 0; i < p->n_tasks; i++) {
        const wsync_plan_task *tk = &p->tasks[i];
        uint64_t sn = (uint64_t)tk->src_rank * p->nics_per_rank + tk->src_nic;
        if (tk->group == g && !S->pending[sn]) S->pending[sn] = 1, senders++;
    }
    return senders;
}

/* cpus > 0: group g's CPU work in core-seconds: its preparations (those
   with tasks, as the replay runs them), every task's start-up, and every
   write at the line rate holding min(1, cpus / S) of a core (S sending
   NICs of the group). */
static double wsync__pl_cpu_work(const wsync__pl_sim *S, uint32_t g, double cpus)
{
    const wsync_plan *p = S->p;
    uint64_t i, senders = wsync__pl_senders(S, g);
    double w = 0, bytes = 0, share;
    for (i = 0; i < p->n_preps; i++) S->ready[i] = 0;
    for (i = 0; i < p->n_tasks; i++) {
        const wsync_plan_task *tk = &p->tasks[i];
        if (tk->group != g) continue;
        S->ready[tk->prep] = 1;
        bytes += (double)tk->len;
        w += S->task_s;
    }
    for (i = 0; i < p->n_preps; i++) {
        const wsync_plan_prep *pr = &p->preps[i];
        if (pr->group != g || !S->ready[i]) continue;
        w += (double)wsync__pl_copied(pr) / S->copy;
        if (pr->flags & WSYNC_PLAN_QUANT) w += (double)pr->src_bytes / S->quant;
    }
    share = senders > 0 && cpus < (double)senders ? cpus / (double)senders : 1.0;
    return w + bytes / S->rate * share;
}

/* A sending NIC's rate while `senders` NICs send at once (cpus and
   nic_senders: one host's cores shared, see wsync_plan_sim_options). */
static double wsync__pl_sim_rate(const wsync_plan_sim_options *o, double senders)
{
    double rate = o->nic_gbps * 1e9 / 8;
    if (o->cpus > 0 && o->nic_senders > 0)
        rate *= (o->nic_senders > o->cpus ? o->nic_senders / o->cpus : 1.0) *
                (senders > o->cpus ? o->cpus / senders : 1.0);
    return rate;
}

/* Group g's gather phase from t0: each holder NIC writes its fetches in
   plan order; a fetch starts when its NIC and the gatherer's receiving
   NIC are free (the NIC that frees first takes the receiver first) and
   lasts task_us plus len at the line rate. With cpus, at least the
   phase's CPU work over the cores. Returns the phase's end (t0 when the
   group fetches nothing). tr: per trainer NIC, when it receives next;
   fo: n_fetches scratch. */
static int wsync__pl_sim_fetch(wsync__pl_sim *S, const wsync_plan_sim_options *o, uint32_t g, double t0,
                               double *tr, uint32_t *fo, double *end)
{
    const wsync_plan *p = S->p;
    uint32_t K = p->nics_per_rank;
    uint64_t NS = (uint64_t)p->n_trainers * K, i, n, senders = 0;
    double rate, rrate, bytes = 0, e = t0;
    wsync__pl_heap heap;
    *end = t0;
    for (i = 0; i < NS; i++) S->nic_first[i] = 0;
    for (i = 0; i < p->n_fetches; i++)
        if (p->preps[p->fetches[i].prep].group == g) {
            const wsync_plan_fetch *f = &p->fetches[i];
            if (S->nic_first[(uint64_t)f->holder * K + f->src_nic]++ == 0) senders++;
            bytes += (double)f->len;
        }
    if (!senders) return 1;
    n = wsync__pl_bounds(S->nic_first, S->nic_next, S->nic_end, NS);
    for (i = 0; i < NS; i++) {
        S->sfree[i] = t0;
        tr[i] = t0;
    }
    for (i = 0; i < p->n_fetches; i++)
        if (p->preps[p->fetches[i].prep].group == g) {
            const wsync_plan_fetch *f = &p->fetches[i];
            fo[S->nic_next[(uint64_t)f->holder * K + f->src_nic]++] = (uint32_t)i;
        }
    heap.v = (wsync__pl_hitem *)wsync__plalloc(&S->a, senders, sizeof *heap.v);
    heap.n = 0;
    if (!heap.v) return 0;
    for (i = 0; i < NS; i++) {
        S->nic_next[i] = S->nic_first[i];
        if (S->nic_first[i] < S->nic_end[i]) wsync__pl_hpush(&heap, wsync__pl_tkey(t0), (uint32_t)i);
    }
    rate = wsync__pl_sim_rate(o, (double)senders);
    rrate = o->recv_gbps < 0 ? 0 : o->recv_gbps > 0 ? o->recv_gbps * 1e9 / 8 : rate;
    while (heap.n > 0) {
        wsync__pl_hitem h = wsync__pl_hpop(&heap);
        const wsync_plan_fetch *f = &p->fetches[fo[S->nic_next[h.id]++]];
        uint64_t rn = (uint64_t)p->preps[f->prep].rank * K + f->dst_nic;
        double st = wsync__pl_tval(h.key), d = S->task_s + (double)f->len / (rrate > 0 && rrate < rate ? rrate : rate);
        if (rrate > 0 && tr[rn] > st) st = tr[rn];
        if (rrate > 0) tr[rn] = st + d;
        S->sfree[h.id] = st + d;
        if (st + d > e) e = st + d;
        S->res->events++;
        if (S->nic_next[h.id] < S->nic_end[h.id]) wsync__pl_hpush(&heap, wsync__pl_tkey(st + d), h.id);
    }
    wsync__rdma_free(&S->a, heap.v);
    if (o->cpus > 0) { /* one host: at least the phase's CPU work over the cores */
        double share = (double)senders > o->cpus ? o->cpus / (double)senders : 1.0;
        double w = ((double)n * S->task_s + bytes / rate * share) / o->cpus;
        S->res->cpu_seconds += w;
        if (t0 + w > e) e = t0 + w;
    }
    *end = e;
    return 1;
}

WSYNC_DEF wsync_result wsync_plan_simulate(const wsync_plan *p, const wsync_plan_sim_options *opt,
                                           wsync_plan_sim_result *out, wsync_error *err)
{
    wsync_plan_sim_options o;
    wsync__pl_sim S;
    wsync_plan_stats st;
    uint64_t NS, NR, i;
    uint32_t g, *fo = NULL;
    double t = 0, barrier, *tr = NULL;
    wsync_result r = WSYNC_OK;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!p || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan simulate: NULL argument");
    memset(out, 0, sizeof *out);
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (!(o.nic_gbps > 0)) o.nic_gbps = 400;
    if (!(o.copy_gbps > 0)) o.copy_gbps = o.nic_gbps * 13.0 / 8.0;
    if (!(o.quant_gbps > 0)) o.quant_gbps = o.copy_gbps;
    if (o.task_us == 0) o.task_us = 5;
    if (o.task_us < 0) o.task_us = 0;
    if (o.barrier_us == 0) o.barrier_us = 50;
    if (o.barrier_us < 0) o.barrier_us = 0;
    memset(&S, 0, sizeof S);
    S.p = p;
    S.a = o.allocator;
    S.rate = o.nic_gbps * 1e9 / 8;
    S.copy = o.copy_gbps * 1e9 / 8;
    S.quant = o.quant_gbps * 1e9 / 8;
    S.task_s = o.task_us * 1e-6;
    S.rrate = o.recv_gbps < 0 ? 0 : o.recv_gbps > 0 ? o.recv_gbps * 1e9 / 8 : S.rate;
    S.wm = o.watermark;
    S.pace = o.pace_gbps > 0 ? o.pace_gbps * 1e9 / 8 : 0;
    S.res = out;
    barrier = o.barrier_us * 1e-6;
    NS = (uint64_t)p->n_trainers * p->nics_per_rank;
    NR = (uint64_t)p->n_inference * p->nics_per_rank;
    S.nic_first = (uint64_t *)wsync__plalloc(&S.a, 3 * NS, 8);
    S.order = (uint32_t *)wsync__plalloc(&S.a, p->n_tasks, 4);
    S.sfree = (double *)wsync__plalloc(&S.a, 2 * NS, sizeof(double));
    S.pending = (uint8_t *)wsync__plalloc(&S.a, NS, 1);
    S.rfree = (double *)wsync__plalloc(&S.a, NR, sizeof(double));
    S.prep_first = (uint64_t *)wsync__plalloc(&S.a, 4 * (uint64_t)p->n_trainers, 8);
    S.porder = (uint32_t *)wsync__plalloc(&S.a, p->n_preps, 4);
    S.pfree = (double *)wsync__plalloc(&S.a, 4 * (uint64_t)p->n_trainers, sizeof(double));
    S.ready = (uint8_t *)wsync__plalloc(&S.a, p->n_preps, 1);
    S.left = (uint64_t *)wsync__plalloc(&S.a, p->n_preps, 8);
    S.rtime = (double *)wsync__plalloc(&S.a, p->n_preps, sizeof(double));
    if (!S.nic_first || !S.order || !S.sfree || !S.pending || !S.rfree || !S.prep_first || !S.porder || !S.pfree ||
        !S.ready || !S.left || !S.rtime) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan simulate: state");
        goto out;
    }
    S.nic_next = S.nic_first + NS;
    S.nic_end = S.nic_next + NS;
    S.swait = S.sfree + NS;
    S.prep_next = S.prep_first + p->n_trainers;
    S.prep_end = S.prep_next + p->n_trainers;
    S.live = S.prep_end + p->n_trainers;
    S.pbusy = S.pfree + p->n_trainers;
    S.qfree = S.pbusy + p->n_trainers;
    S.qbusy = S.qfree + p->n_trainers;
    if (p->n_fetches) {
        if (p->n_fetches >= UINT32_MAX) {
            r = wsync_error_set(err, WSYNC_ERR_LIMIT, "%s", "plan simulate: more than 2^32 fetches");
            goto out;
        }
        tr = (double *)wsync__plalloc(&S.a, NS, sizeof(double));
        fo = (uint32_t *)wsync__plalloc(&S.a, p->n_fetches, 4);
        if (!tr || !fo) {
            r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan simulate: fetches");
            goto out;
        }
    }
    for (g = 0; g < p->n_groups; g++) {
        double t0 = t, gs = t;
        if (p->n_fetches) { /* the group's gather phase, then a barrier */
            double fe;
            if (!wsync__pl_sim_fetch(&S, &o, g, t0, tr, fo, &fe)) {
                r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan simulate: fetches");
                goto out;
            }
            out->fetch_seconds += fe - t0 + barrier;
            if (o.cpus > 0) out->cpu_seconds += barrier;
            t0 = t = fe + barrier;
        }
        if (o.cpus > 0 && o.nic_senders > 0) { /* this group's senders on the cores */
            S.rate = wsync__pl_sim_rate(&o, (double)wsync__pl_senders(&S, g));
            if (o.recv_gbps == 0) S.rrate = S.rate;
        }
        if ((r = wsync__pl_sim_group(&S, g, t0, err)) != WSYNC_OK) goto out;
        t = S.end;
        if (o.cpus > 0) { /* one host: at least the group's CPU work over the cores */
            double w = wsync__pl_cpu_work(&S, g, o.cpus) / o.cpus;
            out->cpu_seconds += w + (g + 1 < p->n_groups ? barrier : 0);
            if (t0 + w > t) t = t0 + w;
        }
        if (g < WSYNC_PLAN_SIM_GROUPS) out->group_seconds[g] = S.end - gs; /* its gather phase included */
        if (g + 1 < p->n_groups) t += barrier;
    }
    out->n_groups = p->n_groups;
    out->seconds = t;
    for (i = 0; i < p->n_trainers; i++) {
        if (S.pbusy[i] > out->prep_max_seconds) out->prep_max_seconds = S.pbusy[i];
        if (S.qbusy[i] > out->prep_max_seconds) out->prep_max_seconds = S.qbusy[i];
    }
    wsync_plan_stats_get(p, &st);
    out->bound_seconds = (double)(st.send_max > st.recv_max ? st.send_max : st.recv_max) / (o.nic_gbps * 1e9 / 8);
out:
    wsync__rdma_free(&S.a, S.ev);
    wsync__rdma_free(&S.a, S.nic_first);
    wsync__rdma_free(&S.a, S.order);
    wsync__rdma_free(&S.a, S.sfree);
    wsync__rdma_free(&S.a, S.pending);
    wsync__rdma_free(&S.a, S.rfree);
    wsync__rdma_free(&S.a, S.prep_first);
    wsync__rdma_free(&S.a, S.porder);
    wsync__rdma_free(&S.a, S.pfree);
    wsync__rdma_free(&S.a, S.ready);
    wsync__rdma_free(&S.a, S.left);
    wsync__rdma_free(&S.a, S.rtime);
    wsync__rdma_free(&S.a, tr);
    wsync__rdma_free(&S.a, fo);
    return r;
}

/* ---- a sparse step's model (SPARSE STEPS) ---- */

static const char *const wsync__pl_phase_names[WSYNC_PLAN_PHASES] = {"diff",    "quantize", "pack",    "wire",
                                                                      "scatter", "verify",   "barriers"};

WSYNC_DEF const char *wsync_plan_phase_name(uint32_t phase)
{
    return phase < WSYNC_PLAN_PHASES ? wsync__pl_phase_names[phase] : NULL;
}

/* The model's constants, resolved: densities, rates in bytes per second. */
typedef struct wsync__pl_sp {
    double bf16, f8b, f8s, pos, sec, above;
    double diff, quant, pack, scat, ver; /* bytes/s */
    double wire, copy, fquant;           /* the simulation's line, copy and quantize rates, bytes/s */
    double mem, cpus;                    /* a rank's memcpy rate, bytes/s; the simulation's cpus (0: none) */
} wsync__pl_sp;

/* A task's bytes in a sparse step: its section header, then positions and
   values (a tile whose scale moved: every code, with its position). */
static double wsync__pl_sp_bytes(const wsync__pl_sp *c, const wsync_plan *p, const wsync_plan_task *tk)
{
    const wsync_plan_prep *pr = &p->preps[tk->prep];
    double len = (double)tk->len;
    if (tk->flags & WSYNC_PLAN_SCALES) return c->sec + len / 4 * c->f8s * (4 + c->pos);
    if (pr->flags & WSYNC_PLAN_QUANT) return c->sec + len * (c->f8b + c->f8s) * (1 + c->pos);
    return c->sec + len / 2 * c->bf16 * (2 + c->pos);
}

static double wsync__pl_sp_frac(double v, double dflt)
{
    return v < 0 ? 0 : v > 0 ? v : dflt;
}

static wsync_result wsync__pl_sp_resolve(const wsync_plan_sim_options *sim, const wsync_plan_sparse_options *opt,
                                         wsync__pl_sp *c, wsync_error *err)
{
    wsync_plan_sparse_options o;
    double nic = sim && sim->nic_gbps > 0 ? sim->nic_gbps : 400, copy, mem;
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (o.bf16 != o.bf16 || o.fp8_bytes != o.fp8_bytes || o.fp8_scales != o.fp8_scales || o.bf16 > 1 ||
        o.fp8_bytes > 1 || o.fp8_scales > 1)
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT,
                               "plan sparse: a density is not a fraction (bf16 %g, fp8 bytes %g, fp8 scales %g)",
                               o.bf16, o.fp8_bytes, o.fp8_scales);
    if (!(o.dense_above >= 0) || !(o.staging >= 0) || !(o.mem_gbps >= 0) || !(o.diff >= 0) || !(o.quant >= 0) ||
        !(o.pack >= 0) || !(o.scatter >= 0) || !(o.verify >= 0))
        return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s",
                               "plan sparse: a rate, ratio, threshold or staging below 0 (or not a number)");
    copy = sim && sim->copy_gbps > 0 ? sim->copy_gbps : nic * 13.0 / 8.0;
    mem = (o.mem_gbps > 0 ? o.mem_gbps : copy) * 1e9 / 8;
    c->bf16 = wsync__pl_sp_frac(o.bf16, WSYNC_PLAN_SPARSE_BF16);
    c->f8b = wsync__pl_sp_frac(o.fp8_bytes, WSYNC_PLAN_SPARSE_FP8_BYTES);
    c->f8s = wsync__pl_sp_frac(o.fp8_scales, WSYNC_PLAN_SPARSE_FP8_SCALES);
    if (c->f8b + c->f8s > 1) c->f8b = 1 - c->f8s;
    c->pos = o.pos_bytes ? o.pos_bytes : 4;
    c->sec = o.section_bytes ? o.section_bytes : 32;
    c->diff = (o.diff > 0 ? o.diff : WSYNC_PLAN_SPARSE_DIFF) * mem;
    c->quant = (o.quant > 0 ? o.quant : WSYNC_PLAN_SPARSE_QUANT) * mem;
    c->pack = (o.pack > 0 ? o.pack : WSYNC_PLAN_SPARSE_PACK) * mem;
    c->scat = (o.scatter > 0 ? o.scatter : WSYNC_PLAN_SPARSE_SCATTER) * mem;
    c->ver = (o.verify > 0 ? o.verify : WSYNC_PLAN_SPARSE_VERIFY) * mem;
    c->mem = mem;
    c->cpus = sim && sim->cpus > 0 ? sim->cpus : 0;
    c->wire = nic * 1e9 / 8;
    c->copy = copy * 1e9 / 8;
    c->fquant = (sim && sim->quant_gbps > 0 ? sim->quant_gbps : copy) * 1e9 / 8;
    /* break-even: a region's sparse bytes cost the wire, the pack and the
       scatter; its dense bytes the wire only */
    c->above = o.dense_above > 0 ? o.dense_above : (1 / c->wire) / (1 / c->wire + 1 / c->pack + 1 / c->scat);
    return WSYNC_OK;
}

/* A sender's slot header in a receiver's staging (WSYNC_SPARSE_HEADER). */
#define WSYNC__PL_SLOT_HEADER 64.0

/* The writes at their sparse sizes: the plan replayed with each dense
   region's task as planned and, per sender, receiver and mesh group, the
   sparse regions as one write of its slot (a header, then their sections)
   at the pair's first task; each fetch's rows as their changes; the
   preparations free (the model counts them as phases before the writes);
   first come, first served (the planned starts are the dense step's).
   *wire: the replay's seconds less its barriers; *barriers: the barriers
   it counted. */
static wsync_result wsync__pl_sp_wire(const wsync_plan *p, const wsync_plan_sim_options *sim, const wsync__pl_sp *c,
                                      const uint8_t *dense, wsync_allocator *a, double *wire, uint64_t *barriers,
                                      uint64_t *bytes, wsync_error *err)
{
    wsync_plan q = *p;
    wsync_plan_sim_options so;
    wsync_plan_sim_result sr;
    wsync_result r;
    uint64_t i, n = 0, G = p->n_groups ? p->n_groups : 1, IG = (uint64_t)p->n_inference * G;
    uint32_t t, *slot;
    double barrier;
    memset(&so, 0, sizeof so);
    if (sim) so = *sim;
    so.copy_gbps = so.quant_gbps = 1e15;
    so.pace_gbps = 0;
    so.watermark = 0;
    barrier = so.barrier_us < 0 ? 0 : (so.barrier_us > 0 ? so.barrier_us : 50) * 1e-6;
    q.tasks = (wsync_plan_task *)wsync__plalloc_raw(a, p->n_tasks, sizeof *q.tasks);
    q.fetches = p->n_fetches ? (wsync_plan_fetch *)wsync__plalloc_raw(a, p->n_fetches, sizeof *q.fetches) : NULL;
    slot = IG <= ((uint64_t)1 << 24) ? (uint32_t *)wsync__plalloc(a, IG, sizeof *slot) : NULL; /* else no slots */
    if (!q.tasks || (p->n_fetches && !q.fetches) || (IG <= ((uint64_t)1 << 24) && !slot)) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan sparse: the replay's tasks");
        goto out;
    }
    *bytes = 0;
    for (t = 0; t < p->n_trainers; t++) {
        for (i = p->rank_first[t]; i < p->rank_first[t + 1]; i++) {
            const wsync_plan_task *tk = &p->tasks[i];
            uint64_t b, key = (uint64_t)tk->dst_rank * G + (tk->group < G ? tk->group : G - 1);
            if (dense[i]) {
                q.tasks[n++] = *tk;
                *bytes += tk->len;
                continue;
            }
            b = (uint64_t)(wsync__pl_sp_bytes(c, p, tk) + 0.5);
            *bytes += b;
            if (slot && slot[key]) {
                q.tasks[slot[key] - 1].len += b;
                continue;
            }
            q.tasks[n] = *tk;
            q.tasks[n].flags = 0;
            q.tasks[n].len = b + (slot ? (uint64_t)WSYNC__PL_SLOT_HEADER : 0);
            *bytes += slot ? (uint64_t)WSYNC__PL_SLOT_HEADER : 0;
            if (slot) slot[key] = (uint32_t)(n + 1);
            n++;
        }
        for (i = p->rank_first[t]; slot && i < p->rank_first[t + 1]; i++)
            slot[(uint64_t)p->tasks[i].dst_rank * G + (p->tasks[i].group < G ? p->tasks[i].group : G - 1)] = 0;
    }
    q.n_tasks = n;
    for (i = 0; i < p->n_fetches; i++) { /* bf16 rows between trainers: their changes */
        q.fetches[i] = p->fetches[i];
        q.fetches[i].len = (uint64_t)(c->sec + (double)p->fetches[i].len / 2 * c->bf16 * (2 + c->pos) + 0.5);
        *bytes += q.fetches[i].len;
    }
    r = wsync_plan_simulate(&q, &so, &sr, err);
    *barriers = (p->n_groups > 0 ? p->n_groups - 1 : 0) + (p->n_fetches ? p->n_groups : 0);
    *wire = sr.seconds - (double)*barriers * barrier;
    if (*wire < 0) *wire = 0;
out:
    wsync__rdma_free(a, q.tasks);
    wsync__rdma_free(a, q.fetches);
    wsync__rdma_free(a, slot);
    return r;
}

WSYNC_DEF wsync_result wsync_plan_sparse_simulate(const wsync_plan *p, const wsync_plan_sim_options *sim,
                                                  const wsync_plan_sparse_options *opt,
                                                  wsync_plan_sparse_result *out, wsync_error *err)
{
    wsync__pl_sp c;
    wsync_allocator a;
    uint64_t T, G, NR, i, nbar = 0;
    uint8_t *dense = NULL, *full = NULL;
    double *snd = NULL, *stg = NULL, *rcv = NULL, barrier, wire = 0, best;
    wsync_result r;
    uint32_t g, k;
    wsync_error_set(err, WSYNC_OK, NULL);
    if (!p || !out) return wsync_error_set(err, WSYNC_ERR_INVALID_ARGUMENT, "%s", "plan sparse: NULL argument");
    memset(out, 0, sizeof *out);
    memset(&c, 0, sizeof c);
    if ((r = wsync__pl_sp_resolve(sim, opt, &c, err)) != WSYNC_OK) return r;
    memset(&a, 0, sizeof a);
    if (sim) a = sim->allocator;
    T = p->n_trainers;
    G = p->n_groups ? p->n_groups : 1;
    NR = (uint64_t)p->n_inference * p->nics_per_rank;
    barrier = sim && sim->barrier_us < 0 ? 0 : (sim && sim->barrier_us > 0 ? sim->barrier_us : 50) * 1e-6;
    dense = (uint8_t *)wsync__plalloc(&a, p->n_tasks, 1);
    full = (uint8_t *)wsync__plalloc(&a, p->n_preps, 1);
    snd = (double *)wsync__plalloc(&a, 4 * T * G, sizeof(double)); /* per rank and group: diff, quantize, pack, base */
    stg = (double *)wsync__plalloc(&a, 2 * NR, sizeof(double));    /* per receiving NIC: staging room, staged */
    rcv = (double *)wsync__plalloc(&a, 3 * (uint64_t)p->n_inference, sizeof(double)); /* staged, dense, all */
    if (!dense || !full || !snd || !stg || !rcv) {
        r = wsync_error_set(err, WSYNC_ERR_OUT_OF_MEMORY, "%s", "plan sparse: state");
        goto out;
    }
    for (i = 0; i < NR; i++)
        stg[i] = opt && opt->staging > 0 ? opt->staging * (double)p->recv_bytes[i] : -1;
    out->dense_above = c.above;
    /* each region sparse or dense, in plan order: over the threshold, or
       past its receiving NIC's staging, it goes dense */
    for (i = 0; i < p->n_tasks; i++) {
        const wsync_plan_task *tk = &p->tasks[i];
        uint64_t rn = (uint64_t)tk->dst_rank * p->nics_per_rank + tk->dst_nic;
        double b = wsync__pl_sp_bytes(&c, p, tk);
        out->dense_bytes += tk->len;
        rcv[3 * tk->dst_rank + 2] += (double)tk->len;
        if (b > c.above * (double)tk->len || (stg[rn] >= 0 && b > stg[rn] - stg[NR + rn])) {
            dense[i] = 1;
            full[tk->prep] = 1;
            out->dense_tasks++;
            rcv[3 * tk->dst_rank + 1] += (double)tk->len;
            continue;
        }
        out->sparse_tasks++;
        stg[NR + rn] += b;
        rcv[3 * tk->dst_rank] += b;
        snd[(4 * (uint64_t)tk->src_rank * G + 4 * (tk->group < G ? tk->group : G - 1)) + 2] += b / c.pack;
    }
    for (i = 0; i < NR; i++)
        if (stg[NR + i] > (double)out->staging_max) out->staging_max = (uint64_t)stg[NR + i];
    /* the senders' work before their writes: every preparation with tasks
       is diffed; fp8 ones update the changed elements (whole tiles whose
       scale moved); one with a dense region is also prepared in full */
    for (i = 0; i < p->n_tasks; i++) full[p->tasks[i].prep] |= 2;
    for (i = 0; i < p->n_preps; i++) {
        const wsync_plan_prep *pr = &p->preps[i];
        double *s = &snd[4 * (uint64_t)pr->rank * G + 4 * (pr->group < G ? pr->group : G - 1)];
        if (!(full[i] & 2)) continue;
        s[0] += (double)pr->src_bytes / c.diff;
        if (!(pr->flags & WSYNC_PLAN_QUANT)) s[3] += (double)pr->src_bytes / c.mem; /* the base a dense step keeps */
        if (pr->flags & WSYNC_PLAN_QUANT)
            s[1] += (double)pr->src_bytes * c.bf16 / c.quant + (double)pr->src_bytes * c.f8s / c.fquant;
        if (full[i] & 1) {
            if (pr->flags & WSYNC_PLAN_QUANT) s[1] += (double)pr->src_bytes / c.fquant;
            s[2] += (double)wsync__pl_copied(pr) / c.copy;
        }
    }
    for (g = 0; g < G; g++) { /* each group's slowest sender; one host: at least all senders' work over the cores */
        uint64_t worst = 0;
        double tot[4] = {0, 0, 0, 0}, base = 0;
        best = -1;
        for (i = 0; i < T; i++) {
            const double *s = &snd[4 * i * G + 4 * g];
            for (k = 0; k < 4; k++) tot[k] += s[k];
            if (s[0] + s[1] + s[2] > best) best = s[0] + s[1] + s[2], worst = i;
            if (s[3] > base) base = s[3];
        }
        if (c.cpus > 0 && (tot[0] + tot[1] + tot[2]) / c.cpus > best)
            for (k = 0; k < 3; k++) out->phase[WSYNC_PLAN_PHASE_DIFF + k] += tot[k] / c.cpus;
        else
            for (k = 0; k < 3; k++) out->phase[WSYNC_PLAN_PHASE_DIFF + k] += snd[4 * worst * G + 4 * g + k];
        out->base_seconds += c.cpus > 0 && tot[3] / c.cpus > base ? tot[3] / c.cpus : base;
    }
    if ((r = wsync__pl_sp_wire(p, sim, &c, dense, &a, &wire, &nbar, &out->wire_bytes, err)) != WSYNC_OK) goto out;
    out->phase[WSYNC_PLAN_PHASE_WIRE] = wire;
    /* the slowest receiver: scatter its staging, then digest; one host: at
       least all receivers' work over the cores (the senders are done) */
    best = -1;
    {
        double tsc = 0, tve = 0;
        for (i = 0; i < p->n_inference; i++) {
            const double *v = &rcv[3 * i];
            double sc = v[0] / c.scat, ve = ((opt && opt->verify_all) ? v[2] : v[0] + v[1]) / c.ver;
            tsc += sc, tve += ve;
            if (sc + ve > best) {
                best = sc + ve;
                out->phase[WSYNC_PLAN_PHASE_SCATTER] = sc;
                out->phase[WSYNC_PLAN_PHASE_VERIFY] = ve;
            }
        }
        if (c.cpus > 0 && (tsc + tve) / c.cpus > best) {
            out->phase[WSYNC_PLAN_PHASE_SCATTER] = tsc / c.cpus;
            out->phase[WSYNC_PLAN_PHASE_VERIFY] = tve / c.cpus;
        }
    }
    out->phase[WSYNC_PLAN_PHASE_BARRIER] = (double)(nbar + 2) * barrier; /* and writes-done, commit */
    for (k = 0; k < WSYNC_PLAN_PHASES; k++) {
        out->seconds += out->phase[k];
        if (out->phase[k] > out->phase[out->bound]) out->bound = k;
    }
out:
    wsync__rdma_free(&a, dense);
    wsync__rdma_free(&a, full);
    wsync__rdma_free(&a, snd);
    wsync__rdma_free(&a, stg);
    wsync__rdma_free(&a, rcv);
    return r;
}

#ifdef __cplusplus
}
#endif
#endif /* WSYNC_RDMA_IMPLEMENTATION */
