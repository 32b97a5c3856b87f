/* direct.c - the direct path in its smallest form: one process writes
   straight into another's memory over the one-host fabric (wsync_rdma.h).

   The receiver (a forked child) registers a buffer and sends the region's
   descriptor over a pipe; the sender (the parent) opens it as a remote,
   writes the bytes in pieces at offsets, flushes, and signals with an
   immediate; the receiver, whose threads did nothing until then, checks
   every byte, and keeps its region until the sender is through (its flush
   after the signal waits on the receiver's side of the fabric; a receiver
   gone by then fails it). The same calls drive the TCP and ibverbs fabrics.

   The one-host fabric writes with process_vm_writev (CMA) where the kernel
   allows it, and otherwise through shared memory (SHM): containers often
   refuse process_vm_writev (seccomp, Yama ptrace rules). AUTO, the default,
   takes CMA when the probe at open_remote passes and SHM when it does not.

   build:  cc -std=c99 -O2 -I.. direct.c -o direct -pthread
   usage:  direct [auto|cma|shm]
           prints the mode that ran; exits 0 when every byte arrived. */
#define _GNU_SOURCE 1 /* fork, pipe, kill; process_vm_writev, memfd for wsync_rdma.h */
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define REGION (4u << 20)
#define PIECES 4
#define STEP 7u /* the immediate: which step's bytes these are */

static uint8_t expected(uint64_t i, uint32_t step)
{
    return (uint8_t)(((i + step) * 2654435761u) >> 13);
}

static int fail(const char *who, const char *what, const wsync_error *err)
{
    fprintf(stderr, "direct: %s: %s: %s (%s)\n", who, what, err->message, wsync_result_name(err->code));
    return 1;
}

/* The child: a region the sender writes into, then a check of its bytes. */
static int receiver(int to_sender, int sender_done, wsync_fabric_host_mode mode)
{
    wsync_fabric_host_options o;
    wsync_fabric f;
    wsync_fabric_mr *mr;
    wsync_fabric_desc desc;
    uint8_t wire[WSYNC_FABRIC_DESC_WIRE], *mem;
    void *p;
    wsync_error err;
    uint32_t imm;
    uint64_t i, bad = 0;
    char c;

    memset(&o, 0, sizeof o);
    o.mode = mode;
    if (wsync_fabric_host_open(&o, &f, &err) != WSYNC_OK) return fail("receiver", "open", &err);
    /* Memory from wsync_fabric_host_alloc (a memfd) can be offered in both
       modes; CMA alone would take any memory (malloc, the engine's own). */
    if (wsync_fabric_host_alloc(&f, REGION, &p, &err) != WSYNC_OK) return fail("receiver", "alloc", &err);
    mem = (uint8_t *)p;
    if (f.reg(f.user, mem, REGION, WSYNC_MEM_HOST, &mr, &desc, &err) != WSYNC_OK)
        return fail("receiver", "reg", &err);
    wsync_fabric_desc_encode(&desc, wire);
    if (write(to_sender, wire, sizeof wire) != (ssize_t)sizeof wire) {
        fprintf(stderr, "direct: receiver: cannot send the descriptor\n");
        return 1;
    }
    close(to_sender);

    /* Nothing to do until the sender says its bytes are in place. */
    if (f.recv_imm(f.user, mr, &imm, 10000, &err) != WSYNC_OK) return fail("receiver", "waiting", &err);
    for (i = 0; i < REGION; i++) bad += mem[i] != expected(i, imm);
    if (bad == 0) printf("direct: receiver: %u bytes of step %u in place, every one as sent\n", REGION, imm);
    else fprintf(stderr, "direct: receiver: %llu of %u bytes differ\n", (unsigned long long)bad, REGION);
    fflush(stdout);
    while (read(sender_done, &c, 1) > 0) {} /* EOF: the sender's last flush has returned */
    f.dereg(f.user, mr);
    wsync_fabric_host_free(&f, mem);
    wsync_fabric_close(&f);
    return bad != 0;
}

/* The parent: opens the receiver's region from its descriptor and writes. */
static int sender(int from_receiver, wsync_fabric_host_mode mode)
{
    wsync_fabric_host_options o;
    wsync_fabric f;
    wsync_fabric_mr *src;
    wsync_fabric_remote *rem;
    wsync_fabric_desc desc, unused;
    uint8_t wire[WSYNC_FABRIC_DESC_WIRE], *mem;
    wsync_error err;
    uint64_t i, piece = REGION / PIECES;
    ssize_t got = 0, n;
    int rc = 1;

    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.send_only = 1; /* writes only: no receiver thread */
    if (wsync_fabric_host_open(&o, &f, &err) != WSYNC_OK) return fail("sender", "open", &err);
    if (!(mem = (uint8_t *)malloc(REGION))) goto close;
    for (i = 0; i < REGION; i++) mem[i] = expected(i, STEP);
    if (f.reg(f.user, mem, REGION, WSYNC_MEM_HOST, &src, &unused, &err) != WSYNC_OK) {
        fail("sender", "reg", &err);
        goto close;
    }
    while (got < (ssize_t)sizeof wire && (n = read(from_receiver, wire + got, sizeof wire - (size_t)got)) > 0)
        got += n;
    if (got != (ssize_t)sizeof wire) {
        fprintf(stderr, "direct: sender: no descriptor from the receiver\n");
        goto close;
    }
    if (wsync_fabric_desc_decode(wire, sizeof wire, &desc, &err) != WSYNC_OK ||
        f.open_remote(f.user, &desc, &rem, &err) != WSYNC_OK) {
        fail("sender", "opening the receiver's region", &err);
        goto close;
    }
    printf("direct: one-host fabric, mode %s\n",
           wsync_fabric_host_remote_mode(&f, rem) == WSYNC_FABRIC_HOST_CMA
               ? "CMA (process_vm_writev into the receiver's memory)"
               : mode == WSYNC_FABRIC_HOST_AUTO ? "SHM (shared memory; this kernel refused process_vm_writev)"
                                                : "SHM (shared memory)");
    fflush(stdout);

    /* Pieces in reverse order, to show the offsets are the caller's. */
    for (i = PIECES; i-- > 0;)
        if (f.write(f.user, src, i * piece, rem, i * piece, piece, &err) != WSYNC_OK) {
            fail("sender", "write", &err);
            goto close_remote;
        }
    /* flush: every byte written is visible at the receiver; then the signal,
       an immediate (0 bytes) delivered after them. */
    if (f.flush(f.user, &err) != WSYNC_OK || f.write_imm(f.user, src, 0, rem, 0, 0, STEP, &err) != WSYNC_OK ||
        f.flush(f.user, &err) != WSYNC_OK) {
        fail("sender", "flush and signal", &err);
        goto close_remote;
    }
    rc = 0;
close_remote:
    f.close_remote(f.user, rem);
close:
    wsync_fabric_close(&f); /* deregisters what is left */
    free(mem);
    return rc;
}

int main(int argc, char **argv)
{
    wsync_fabric_host_mode mode = WSYNC_FABRIC_HOST_AUTO;
    int fds[2], done[2], status, rc;
    pid_t pid;

    if (argc > 2 || (argc == 2 && strcmp(argv[1], "auto") && strcmp(argv[1], "cma") && strcmp(argv[1], "shm"))) {
        fprintf(stderr, "usage: direct [auto|cma|shm]\n");
        return 2;
    }
    if (argc == 2 && !strcmp(argv[1], "cma")) mode = WSYNC_FABRIC_HOST_CMA;
    if (argc == 2 && !strcmp(argv[1], "shm")) mode = WSYNC_FABRIC_HOST_SHM;

    /* Fork before any fabric opens: a fabric's threads do not survive fork. */
    if (pipe(fds) != 0 || pipe(done) != 0 || (pid = fork()) < 0) {
        perror("direct");
        return 1;
    }
    if (pid == 0) {
        close(fds[0]);
        close(done[1]);
        rc = receiver(fds[1], done[0], mode);
        fflush(stdout);
        _exit(rc);
    }
    close(fds[1]);
    close(done[0]);
    rc = sender(fds[0], mode);
    close(fds[0]);
    close(done[1]); /* the receiver may let its region go */
    if (rc != 0) kill(pid, SIGKILL); /* it would wait for the signal until its timeout */
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    printf("direct: %s\n", rc == 0 ? "ok" : "FAILED");
    return rc;
}
