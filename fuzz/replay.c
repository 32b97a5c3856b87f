/* replay.c - run a fuzz harness's LLVMFuzzerTestOneInput over saved inputs,
   without a fuzzer, with any C99 compiler.

   usage: replay_NAME PATH...
     Each PATH is a file or a directory; a directory's files are replayed,
     and those of its subdirectories one level down. A PATH that does not
     exist is skipped with a note (an empty or absent fuzz/data/NAME is fine).
     Hidden files and README* are skipped. Files run in name order.
   Prints "summary: P passed, 0 failed" (P = inputs replayed). A harness that
   finds a violation aborts the process, which tests/run.sh counts as a
   failure; the path of the input being run is printed first.
   REPLAY_VERBOSE=1 prints each path as it runs.

   Link with the harness as a second translation unit, e.g.
     cc -std=c99 -I. -o build/replay_st_parse fuzz/replay.c fuzz/fuzz_st_parse.c
   (this file must not define WSYNC_IMPLEMENTATION; the harness does). */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_DEPTH 2 /* the named directory and one level below it */

static const char *replay_current; /* path being run, for crash reports */
static unsigned long replay_count;
static int replay_verbose;

/* Async-signal-safe: write(2) only. */
static void replay_say_current(void)
{
    static const char a[] = "replay: crashed on input ";
    const char *p = replay_current;
    ssize_t w;
    if (!p) return;
    w = write(2, a, sizeof a - 1);
    w = write(2, p, strlen(p));
    w = write(2, "\n", 1);
    (void)w;
}

static void replay_on_abort(int sig)
{
    replay_say_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Sanitizers end the process without a signal; their death callback still
   runs. Weak, so a build without sanitizers links without it. */
#if defined(__GNUC__) || defined(__clang__)
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));
#define REPLAY_HAVE_DEATH_CALLBACK 1
#endif

static int replay_read(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    if (!f) return -1;
    for (;;) {
        size_t got;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            uint8_t *nb = (uint8_t *)realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
            cap = ncap;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    *out = buf;
    *len = n;
    return 0;
}

static int replay_file(const char *path)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (replay_read(path, &bytes, &len) != 0) {
        fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    replay_current = path;
    if (replay_verbose) {
        fprintf(stderr, "replay: %s (%lu bytes)\n", path, (unsigned long)len);
        fflush(stderr);
    }
    /* the harness copies the bytes into an exactly sized buffer itself */
    LLVMFuzzerTestOneInput(bytes, len);
    replay_current = NULL;
    free(bytes);
    replay_count++;
    return 0;
}

static int replay_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_path(const char *path, int depth, int named);

static int replay_dir(const char *path, int depth)
{
    DIR *dir = opendir(path);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0, i;
    int rc = 0;
    if (!dir) {
        fprintf(stderr, "replay: cannot open directory %s: %s\n", path, strerror(errno));
        return -1;
    }
    while ((e = readdir(dir)) != NULL) {
        size_t plen = strlen(path), nlen = strlen(e->d_name);
        char *full;
        if (e->d_name[0] == '.' || strncmp(e->d_name, "README", 6) == 0) continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = (char **)realloc(names, ncap * sizeof *nn);
            if (!nn) {
                rc = -1;
                break;
            }
            names = nn;
            cap = ncap;
        }
        full = (char *)malloc(plen + 1 + nlen + 1);
        if (!full) {
            rc = -1;
            break;
        }
        memcpy(full, path, plen);
        full[plen] = '/';
        memcpy(full + plen + 1, e->d_name, nlen + 1);
        names[n++] = full;
    }
    closedir(dir);
    if (n > 1) qsort(names, n, sizeof *names, replay_cmp);
    for (i = 0; i < n; i++) {
        if (rc == 0 && replay_path(names[i], depth + 1, 0) != 0) rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

/* named: given on the command line (a missing one is skipped, not an error) */
static int replay_path(const char *path, int depth, int named)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (named && errno == ENOENT) {
            fprintf(stderr, "replay: %s does not exist, skipped\n", path);
            return 0;
        }
        fprintf(stderr, "replay: cannot stat %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        if (depth >= REPLAY_MAX_DEPTH) return 0;
        return replay_dir(path, depth);
    }
    if (!S_ISREG(st.st_mode)) return 0;
    return replay_file(path);
}

int main(int argc, char **argv)
{
    int i, bad = 0;
    const char *v = getenv("REPLAY_VERBOSE");
    replay_verbose = v && *v && *v != '0';
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    signal(SIGABRT, replay_on_abort);
#ifdef REPLAY_HAVE_DEATH_CALLBACK
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(replay_say_current);
#endif
    for (i = 1; i < argc; i++)
        if (replay_path(argv[i], 0, 1) != 0) bad++;
    /* an unreadable input is a failure of the run, not of the code under test */
    printf("summary: %lu passed, %d failed\n", replay_count, bad);
    return bad ? 1 : 0;
}
