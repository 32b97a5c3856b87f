/* The one-host fabric between users: its receiver's socket is a file in a
   0700 directory of its own (not the abstract namespace, whose names
   /proc/net/unix lists to everyone), so another user cannot connect; and
   where the directory is opened up anyway, the receiver checks who
   connects (SO_PEERCRED) and takes only its own user or root: a process
   of another uid neither writes the weights (CMA or SHM) nor receives the
   shared memory's fd. Real processes: the other user is a child that drops
   to uid/gid 65534 (nobody); run as root, as CI is (without root that case
   is said to be skipped, and not counted). Also the nearest common
   ancestor that allow_any_writer names with PR_SET_PTRACER (Yama itself
   is not on every kernel: where it is missing the exception cannot be
   observed, only the pid it names). */
#define _GNU_SOURCE 1
#define WSYNC_IMPLEMENTATION
#define WSYNC_RDMA_IMPLEMENTATION
#include "wsync_rdma.h"
#include "check.h"

#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN (1u << 16)

/* In a child: exit 0 when open_remote on d is refused naming another
   user (and nothing was written), 1 when it got through, 2 on a setup
   failure. */
static int child_as_nobody(const wsync_fabric_desc *d, wsync_fabric_host_mode mode)
{
    wsync_fabric_host_options ho;
    wsync_fabric tx;
    wsync_fabric_remote *rem = NULL;
    wsync_error e;
    wsync_result r;
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) return 2;
    memset(&ho, 0, sizeof ho);
    ho.send_only = 1;
    ho.mode = mode;
    ho.timeout_ms = 3000;
    if (wsync_fabric_host_open(&ho, &tx, &e) != WSYNC_OK) return 2;
    r = tx.open_remote(tx.user, d, &rem, &e);
    if (r == WSYNC_OK) {
        static uint8_t src[64];
        wsync_fabric_mr *sm = NULL;
        wsync_fabric_desc sd;
        memset(src, 0xEE, sizeof src);
        if (tx.reg(tx.user, src, sizeof src, WSYNC_MEM_HOST, &sm, &sd, &e) == WSYNC_OK)
            (void)tx.write(tx.user, sm, 0, rem, 0, sizeof src, &e);
        (void)tx.flush(tx.user, &e);
        return 1;
    }
    printf("  (nobody's open_remote: %s)\n", e.message);
    return strstr(e.message, "another user") || strstr(e.message, "Permission denied") ? 0 : 3;
}

/* The socket's path from a one-host descriptor. */
static void sock_path(const wsync_fabric_desc *d, char *out, size_t cap)
{
    size_t n = d->n_bytes > 41 ? d->bytes[40] : 0;
    if (n >= cap) n = cap - 1;
    memcpy(out, d->bytes + 41, n);
    out[n] = 0;
}

int main(void)
{
    wsync_fabric_host_options ho;
    wsync_fabric rx, tx;
    wsync_fabric_mr *mr = NULL, *sm = NULL;
    wsync_fabric_desc d, sd;
    wsync_fabric_remote *rem = NULL;
    wsync_fabric_stats st;
    wsync_error e;
    uint8_t *mem = NULL, src[256];
    int mode;
    memset(&ho, 0, sizeof ho);
    TEST_BEGIN("one-host fabric: a sender of this user writes (the check lets its own user through)");
    CHECK_EQ_INT(wsync_fabric_host_open(&ho, &rx, &e), WSYNC_OK);
    CHECK_EQ_INT(wsync_fabric_host_alloc(&rx, LEN, (void **)&mem, &e), WSYNC_OK);
    CHECK_EQ_INT(rx.reg(rx.user, mem, LEN, WSYNC_MEM_HOST, &mr, &d, &e), WSYNC_OK);
    ho.send_only = 1;
    CHECK_EQ_INT(wsync_fabric_host_open(&ho, &tx, &e), WSYNC_OK);
    memset(src, 0x5A, sizeof src);
    CHECK_EQ_INT(tx.reg(tx.user, src, sizeof src, WSYNC_MEM_HOST, &sm, &sd, &e), WSYNC_OK);
    CHECK_MSG(tx.open_remote(tx.user, &d, &rem, &e) == WSYNC_OK, "%s", e.message);
    if (rem) {
        CHECK_EQ_INT(tx.write(tx.user, sm, 0, rem, 100, sizeof src, &e), WSYNC_OK);
        CHECK_EQ_INT(tx.flush(tx.user, &e), WSYNC_OK);
        CHECK(mem[100] == 0x5A && mem[100 + sizeof src - 1] == 0x5A && mem[99] == 0);
        tx.close_remote(tx.user, rem);
    }
    wsync_fabric_close(&tx);
    TEST_END();
    TEST_BEGIN("one-host fabric: the receiver's socket is a file in a 0700 directory of this user's");
    {
        char path[128], dir[128];
        struct stat sb;
        sock_path(&d, path, sizeof path);
        snprintf(dir, sizeof dir, "%s", path);
        if (strrchr(dir, '/')) *strrchr(dir, '/') = 0;
        printf("  socket: %s\n", path);
        CHECK_MSG(path[0] == '/', "not a path: %s", path);
        CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700 && sb.st_uid == geteuid());
        CHECK(stat(path, &sb) == 0 && S_ISSOCK(sb.st_mode));
    }
    TEST_END();
    TEST_BEGIN("one-host fabric: allow_any_writer's ptracer is the writers' nearest common ancestor, never pid 1");
    {
        pid_t a = fork(), b;
        if (a == 0) {
            pause();
            _exit(0);
        }
        b = fork();
        if (b == 0) {
            pause();
            _exit(0);
        }
        CHECK(a > 0 && b > 0);
        CHECK_EQ_INT(wsync__host_common(a, b), getpid());
        CHECK_EQ_INT(wsync__host_common(a, a), a);
        CHECK_EQ_INT(wsync__host_common(getpid(), b), getpid());
        CHECK_EQ_INT(wsync__host_ppid(a), getpid());
        kill(a, SIGKILL);
        kill(b, SIGKILL);
        waitpid(a, NULL, 0);
        waitpid(b, NULL, 0);
    }
    TEST_END();
    for (mode = 0; mode < 6; mode++) {
        char name[160];
        pid_t pid;
        int status = 0;
        int open_dir = mode >= 3; /* the directory opened up: the uid check is what refuses */
        char path[128], dir[128];
        sock_path(&d, path, sizeof path);
        snprintf(dir, sizeof dir, "%s", path);
        if (strrchr(dir, '/')) *strrchr(dir, '/') = 0;
        snprintf(name, sizeof name, "one-host fabric: a process of another uid (nobody) is refused %s, mode %s%s; "
                 "nothing written",
                 open_dir ? "at the handshake (directory opened up)" : "by the 0700 directory",
                 mode % 3 == 0 ? "AUTO" : mode % 3 == 1 ? "CMA" : "SHM",
                 open_dir ? ", and the receiver logs its uid" : "");
        if (geteuid() != 0) {
            printf("skipped (not counted): %s: needs root to start a process of another uid\n", name);
            continue;
        }
        TEST_BEGIN(name);
        memset(mem, 0, LEN);
        if (open_dir) {
            CHECK(chmod(dir, 0711) == 0 && chmod(path, 0777) == 0);
        }
        fflush(stdout);
        pid = fork();
        if (pid == 0) _exit(child_as_nobody(&d, (wsync_fabric_host_mode)(mode % 3)));
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
        {
            size_t k, nz = 0;
            for (k = 0; k < LEN; k++) nz += mem[k] != 0;
            CHECK(nz == 0);
        }
        if (open_dir) {
            CHECK_MSG(wsync_fabric_stats_get(&rx, &st) && st.rejected > 0 && strstr(st.last_reject, "uid 65534"),
                      "%s", st.last_reject);
            printf("  receiver's log: %s\n", st.last_reject);
            CHECK(chmod(dir, 0700) == 0);
        }
        TEST_END();
    }
    rx.dereg(rx.user, mr);
    wsync_fabric_host_free(&rx, mem);
    wsync_fabric_close(&rx);
    return check_summary();
}
