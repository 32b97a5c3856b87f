/* bench_cpu.h - the head every bench prints: the CPU (model name, family
   and model, its SIMD flags), the SIMD paths this build has, and the paths
   AUTO chose (with how long the choice took at first use). Figures from
   different machines then say which machine they came from.

   Include after wsync.h (with WSYNC_IMPLEMENTATION); call
   bench_cpu_print(stdout, "bench_x") before anything else calls the diff
   or the digest, so that the time of the first use is the choice's own.
   Linux: /proc/cpuinfo; elsewhere on x86 with GNU C: CPUID's brand string. */
#ifndef WSYNC_BENCH_CPU_H
#define WSYNC_BENCH_CPU_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif

/* The flags of /proc/cpuinfo worth naming for wsync's paths. */
static int bench_cpu__simd_flag(const char *f)
{
    static const char *const pre[] = {"sse", "ssse", "avx", "bmi", "popcnt", "fma", "f16c", "gfni",
                                      "vpclmul", "vaes", "amx", "asimd", "sve", "neon"};
    size_t i;
    for (i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (strncmp(f, pre[i], strlen(pre[i])) == 0) return 1;
    return 0;
}

/* Writes "name: value" of the first such line of /proc/cpuinfo to out. */
static int bench_cpu__info(const char *key, char *out, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    size_t kl = strlen(key);
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        char *v = line + kl;
        if (strncmp(line, key, kl) != 0) continue;
        while (*v == ' ' || *v == '\t') v++;
        if (*v != ':') continue; /* "model" is not "model name" */
        v++;
        while (*v == ' ') v++;
        v[strcspn(v, "\n")] = 0;
        snprintf(out, cap, "%s", v);
        fclose(f);
        return 1;
    }
    fclose(f);
    return 0;
}

static double bench_cpu__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The paths this build and CPU have, for the diff, as "scalar sse2 avx2". */
static void bench_cpu_paths(char *out, size_t cap)
{
    int i;
    size_t at = 0;
    out[0] = 0;
    for (i = WSYNC_IMPL_SCALAR; i < WSYNC_IMPL_COUNT; i++) {
        uint8_t x = 0;
        uint32_t p = 0;
        int ok = 0;
        (void)wsync_diff_using((wsync_impl)i, &x, &x, 0, 1, &p, &ok);
        if (ok && at < cap) at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? " " : "", wsync_impl_name((wsync_impl)i));
    }
}

static void bench_cpu_print(FILE *out, const char *prog)
{
    char model[256] = "unknown", fam[32] = "?", mod[32] = "?", flags[8192] = "", paths[128], simd[2048] = "";
    const char *env[3];
    double t0, t_choice;
    wsync_impl d, g;
    size_t at = 0;
    if (!bench_cpu__info("model name", model, sizeof model)) {
#if defined(__GNUC__) && defined(__x86_64__)
        unsigned r[12], i;
        for (i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        memcpy(model, r, 48);
        model[48] = 0;
#endif
    }
    bench_cpu__info("cpu family", fam, sizeof fam);
    bench_cpu__info("model", mod, sizeof mod);
    if (bench_cpu__info("flags", flags, sizeof flags) || bench_cpu__info("Features", flags, sizeof flags)) {
        char *tok = strtok(flags, " ");
        for (; tok; tok = strtok(NULL, " "))
            if (bench_cpu__simd_flag(tok) && at < sizeof simd)
                at += (size_t)snprintf(simd + at, sizeof simd - at, "%s%s", at ? " " : "", tok);
    } else {
        snprintf(simd, sizeof simd, "(no /proc/cpuinfo; paths the CPU has below)");
    }
    bench_cpu_paths(paths, sizeof paths);
    t0 = bench_cpu__now();
    d = wsync_diff_impl();
    t_choice = bench_cpu__now() - t0;
    g = wsync_digest_impl();
    env[0] = getenv("WSYNC_SIMD");
    env[1] = getenv("WSYNC_DIFF_IMPL");
    env[2] = getenv("WSYNC_DIGEST_IMPL");
    fprintf(out, "%s: cpu: %s (family %s model %s)\n", prog, model, fam, mod);
    fprintf(out, "%s: cpu flags: %s\n", prog, simd);
    fprintf(out, "%s: build: %s; paths compiled and on this CPU: %s\n", prog,
#if defined(WSYNC_NO_SIMD)
            "portable (WSYNC_NO_SIMD)",
#else
            "SIMD",
#endif
            paths);
    fprintf(out, "%s: AUTO: diff %s, digest %s (chosen in %.1f ms at first use%s%s%s%s%s%s)\n", prog,
            wsync_impl_name(d), wsync_impl_name(g), t_choice * 1e3, env[0] ? "; WSYNC_SIMD=" : "",
            env[0] ? env[0] : "", env[1] ? "; WSYNC_DIFF_IMPL=" : "", env[1] ? env[1] : "",
            env[2] ? "; WSYNC_DIGEST_IMPL=" : "", env[2] ? env[2] : "");
    fflush(out);
}

#endif
