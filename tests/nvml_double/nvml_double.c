/*
 * An NVML test double: libnvidia-ml.so.1 for machines without an NVIDIA driver.
 *
 * It exports, with NVML's real C ABI, the functions the node agent calls through nvml-wrapper
 * (which opens libnvidia-ml.so.1 by name and panics on exit without nvmlShutdown), so that the
 * real `flexgate-agent` binary runs its real NVML code path against it through the dynamic
 * loader (LD_LIBRARY_PATH). It is NOT a driver: it models the few behaviours the agent relies on
 * and the faults operators report. See README.md beside it.
 *
 * Scripting. FLEXGATE_NVML_DOUBLE names a directory:
 *   gpus      read at the first nvmlInit (and again by `reload`, which adds the lines beyond the
 *             GPUs it has): one line per GPU, `MODEL [persistence=0|1] [mig=N]`, MODEL one of
 *             h100_sxm, h200_sxm, b200 (their constraints and defaults in `models` below);
 *   commands  read before every call, new lines only (append to it while the agent runs);
 *             I is the GPU's index at the first nvmlInit (its minor number and UUID suffix),
 *             which stays its name when another GPU vanishes and NVML's indices shift:
 *             reload                  driver reload: every limit back to its default, and the
 *                                     gpus file read again (GPUs added at its end appear)
 *             set I MW                another tool sets GPU I's limit to MW (nvidia-smi -pl, a
 *                                     boot script); not range-checked, so a broken driver's
 *                                     reading outside the constraints can be played
 *             constraints I MIN MAX   GPU I reports these power-limit constraints (mW)
 *             oob I MW                an out-of-band limiter (BMC) holds GPU I at MW (0: none)
 *             lost I                  GPU I is lost: every call on it answers GPU_IS_LOST
 *             found I                 GPU I answers again
 *             vanish I                GPU I is no longer listed (the count drops, the later
 *                                     GPUs' indices shift down, its UUID is not found)
 *             appear I                GPU I is listed again
 *             hang NAME SECONDS [I]   calls whose name contains NAME (on GPU I only, if given)
 *                                     sleep SECONDS first; `hang none 0` ends it, hung calls
 *                                     included
 *             ignore_set I 0|1        a set on GPU I answers success and changes nothing
 *             clamp I MW              the driver raises any limit set on GPU I to at least MW
 *             permission I 0|1        a set on GPU I answers NO_PERMISSION (0) or works (1)
 *             persistence I 0|1       GPU I's persistence mode
 *             mig I N                 GPU I's MIG instances (0: MIG mode off)
 *             power I MW              GPU I draws MW (before its limit)
 *             reading I MW            GPU I's sensor reports MW whatever it draws (0: a real reading)
 *             no_energy I 0|1         GPU I's energy counter answers NOT_SUPPORTED
 *   state     written after every change: `I requested_mw enforced_mw lost persistence mig
 *             listed`, one line per GPU, for the test to read what the "driver" holds;
 *   sets      appended at every set the driver answers with success: `I asked_mw requested_mw`,
 *             so a test sees every value ever written, not only the last;
 *   driver    the double's own record of everything above, so that what the "driver" holds
 *             outlives the process that loaded it (an agent killed and restarted finds the
 *             limits it left, as on a GPU node); a test never writes it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

struct model {
    const char *key;
    const char *name;
    unsigned int min_mw, default_mw, max_mw;
};

/* Power-limit ranges: HGX H100 as `nvidia-smi -q -d power` reports them; H200 (minimum not
 * published); B200 as its DGX Redfish PowerLimitWatts states. */
static const struct model models[] = {
    {"h100_sxm", "NVIDIA H100 80GB HBM3", 200000, 700000, 700000},
    {"h200_sxm", "NVIDIA H200", 200000, 700000, 700000},
    {"b200", "NVIDIA B200", 200000, 1000000, 1000000},
};

#define MAX_GPUS 16
/* Most MIG devices one of these GPUs can be split into (7 on H100, H200 and B200). */
#define MAX_MIG 7

struct gpu {
    int index; /* its index at the first nvmlInit: minor number, UUID suffix, command name */
    const struct model *model;
    unsigned int requested_mw; /* what was set */
    unsigned int oob_mw;       /* an out-of-band limiter; 0: none */
    unsigned int clamp_mw;     /* the driver raises a set limit to at least this; 0: none */
    unsigned int draw_mw;      /* what the GPU would draw uncapped */
    unsigned int reading_mw;   /* a sensor that reports this whatever the draw; 0: none */
    unsigned int min_mw, max_mw; /* the constraints it reports (the model's unless scripted) */
    unsigned long long energy_mj;
    int lost, ignore_set, permission, persistence, mig, no_energy, listed;
};

static struct gpu gpus[MAX_GPUS];
/* MIG device handles: distinct addresses, never valid for a parent GPU's calls. */
static char mig_handles[MAX_GPUS][MAX_MIG];
static unsigned int gpu_count;
static int initialised;
static char dir[1024];
static long commands_offset;
static char hang_name[128];
static unsigned int hang_seconds;
static long hang_gpu = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void path_of(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", dir, name); }

static unsigned int enforced(const struct gpu *g) {
    unsigned int e = g->requested_mw;
    if (g->oob_mw && g->oob_mw < e) e = g->oob_mw;
    return e;
}

static const struct model *model_of(const char *key) {
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (strcmp(models[i].key, key) == 0) return &models[i];
    return NULL;
}

/* Write `name` through a temporary file and a rename, so a reader never sees half of it. */
static FILE *open_tmp(const char *name, char *path, size_t path_size, char *tmp, size_t tmp_size) {
    path_of(path, path_size, name);
    snprintf(tmp, tmp_size, "%s.tmp", path);
    return fopen(tmp, "w");
}

static void write_state(void) {
    char path[1100], tmp[1110];
    FILE *f = open_tmp("state", path, sizeof path, tmp, sizeof tmp);
    if (f) {
        for (unsigned int i = 0; i < gpu_count; i++)
            fprintf(f, "%u %u %u %d %d %d %d\n", i, gpus[i].requested_mw, enforced(&gpus[i]), gpus[i].lost,
                    gpus[i].persistence, gpus[i].mig, gpus[i].listed);
        fclose(f);
        rename(tmp, path);
    }
    f = open_tmp("driver", path, sizeof path, tmp, sizeof tmp);
    if (f) {
        fprintf(f, "%ld %s %u %ld\n", commands_offset, hang_name[0] ? hang_name : "-", hang_seconds, hang_gpu);
        for (unsigned int i = 0; i < gpu_count; i++) {
            const struct gpu *g = &gpus[i];
            fprintf(f, "%s %u %u %u %u %u %u %u %d %d %d %d %d %d %d\n", g->model->key, g->requested_mw, g->oob_mw,
                    g->clamp_mw, g->draw_mw, g->reading_mw, g->min_mw, g->max_mw, g->lost, g->ignore_set,
                    g->permission, g->persistence, g->mig, g->no_energy, g->listed);
        }
        fclose(f);
        rename(tmp, path);
    }
}

/* What the "driver" held before this process loaded it; 0 when there is no record. */
static int load_driver(void) {
    char path[1100], line[512], name[128] = {0};
    path_of(path, sizeof path, "driver");
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long offset = 0, hg = -1;
    unsigned int hs = 0;
    if (!fgets(line, sizeof line, f) || sscanf(line, "%ld %127s %u %ld", &offset, name, &hs, &hg) != 4) {
        fclose(f);
        return 0;
    }
    unsigned int n = 0;
    while (n < MAX_GPUS && fgets(line, sizeof line, f)) {
        char key[64] = {0};
        struct gpu g;
        memset(&g, 0, sizeof g);
        if (sscanf(line, "%63s %u %u %u %u %u %u %u %d %d %d %d %d %d %d", key, &g.requested_mw, &g.oob_mw,
                   &g.clamp_mw, &g.draw_mw, &g.reading_mw, &g.min_mw, &g.max_mw, &g.lost, &g.ignore_set,
                   &g.permission, &g.persistence, &g.mig, &g.no_energy, &g.listed) != 15)
            break;
        g.model = model_of(key);
        if (!g.model) break;
        g.index = (int)n;
        gpus[n++] = g;
    }
    fclose(f);
    if (n == 0) return 0;
    gpu_count = n;
    commands_offset = offset;
    snprintf(hang_name, sizeof hang_name, "%s", strcmp(name, "-") == 0 ? "" : name);
    hang_seconds = hs;
    hang_gpu = hg;
    return 1;
}

/* Read the gpus file, adding the GPUs beyond the `gpu_count` already known. */
static int read_gpus(void) {
    char path[1100], line[256];
    path_of(path, sizeof path, "gpus");
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned int line_gpu = 0;
    while (fgets(line, sizeof line, f) && line_gpu < MAX_GPUS) {
        char key[64] = {0};
        if (sscanf(line, "%63s", key) != 1 || key[0] == '#') continue;
        const struct model *m = model_of(key);
        if (!m) continue;
        if (line_gpu++ < gpu_count) continue;
        struct gpu *g = &gpus[gpu_count];
        memset(g, 0, sizeof *g);
        g->index = (int)gpu_count;
        g->model = m;
        g->requested_mw = m->default_mw;
        g->draw_mw = m->default_mw * 9 / 10;
        g->min_mw = m->min_mw;
        g->max_mw = m->max_mw;
        g->permission = 1;
        g->listed = 1;
        g->persistence = strstr(line, "persistence=0") ? 0 : 1;
        const char *mig = strstr(line, "mig=");
        g->mig = mig ? atoi(mig + 4) : 0;
        if (g->mig < 0) g->mig = 0;
        if (g->mig > MAX_MIG) g->mig = MAX_MIG;
        gpu_count++;
    }
    fclose(f);
    return 1;
}

static struct gpu *gpu_at(long i) { return (i >= 0 && (unsigned long)i < gpu_count) ? &gpus[i] : NULL; }

/* Apply the command lines appended since the last call. */
static void read_commands(void) {
    char path[1100], line[256];
    path_of(path, sizeof path, "commands");
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fseek(f, commands_offset, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    int changed = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n') break; /* a line still being written */
        commands_offset += (long)n;
        changed = 1;
        char word[64] = {0}, arg[128] = {0};
        long a = -1, b = 0, c = 0;
        if (sscanf(line, "%63s", word) != 1) continue;
        if (strcmp(word, "reload") == 0) {
            for (unsigned int i = 0; i < gpu_count; i++) gpus[i].requested_mw = gpus[i].model->default_mw;
            read_gpus();
        } else if (strcmp(word, "hang") == 0 && sscanf(line, "%*s %127s %ld", arg, &b) == 2) {
            long gpu = -1;
            if (sscanf(line, "%*s %*s %*d %ld", &gpu) != 1) gpu = -1;
            snprintf(hang_name, sizeof hang_name, "%s", strcmp(arg, "none") == 0 ? "" : arg);
            hang_seconds = (unsigned int)(b < 0 ? 0 : b);
            hang_gpu = gpu;
        } else if (strcmp(word, "constraints") == 0 && sscanf(line, "%*s %ld %ld %ld", &a, &b, &c) == 3) {
            struct gpu *g = gpu_at(a);
            if (!g) continue;
            g->min_mw = (unsigned int)b;
            g->max_mw = (unsigned int)c;
        } else if (sscanf(line, "%*s %ld %ld", &a, &b) >= 1) {
            struct gpu *g = gpu_at(a);
            if (!g) continue;
            if (strcmp(word, "lost") == 0) g->lost = 1;
            else if (strcmp(word, "found") == 0) g->lost = 0;
            else if (strcmp(word, "vanish") == 0) g->listed = 0;
            else if (strcmp(word, "appear") == 0) g->listed = 1;
            else if (strcmp(word, "set") == 0) g->requested_mw = (unsigned int)b;
            else if (strcmp(word, "oob") == 0) g->oob_mw = (unsigned int)b;
            else if (strcmp(word, "ignore_set") == 0) g->ignore_set = (int)b;
            else if (strcmp(word, "clamp") == 0) g->clamp_mw = (unsigned int)b;
            else if (strcmp(word, "permission") == 0) g->permission = (int)b;
            else if (strcmp(word, "persistence") == 0) g->persistence = (int)b;
            else if (strcmp(word, "mig") == 0) g->mig = b < 0 ? 0 : (b > MAX_MIG ? MAX_MIG : (int)b);
            else if (strcmp(word, "power") == 0) g->draw_mw = (unsigned int)b;
            else if (strcmp(word, "reading") == 0) g->reading_mw = (unsigned int)b;
            else if (strcmp(word, "no_energy") == 0) g->no_energy = (int)b;
        }
    }
    fclose(f);
    if (changed) write_state();
}

static int hang_applies(const char *name, long gpu) {
    return hang_name[0] && hang_seconds && strstr(name, hang_name) && (hang_gpu < 0 || gpu < 0 || hang_gpu == gpu);
}

/* Sleep (the lock released) while the call is scripted to hang on this GPU (-1: any GPU): up to
 * the scripted seconds, or until a command ends the hang. */
static void maybe_hang(const char *name, long gpu) {
    if (!hang_applies(name, gpu)) return;
    unsigned int total_ms = hang_seconds * 1000;
    for (unsigned int waited = 0; waited < total_ms; waited += 50) {
        pthread_mutex_unlock(&lock);
        usleep(50 * 1000); /* a hung driver call: the caller waits, the other callers do not */
        pthread_mutex_lock(&lock);
        read_commands();
        if (!hang_applies(name, gpu)) break;
    }
}

/* Every entry point: take the lock and read new commands. */
static nvmlReturn_t enter(const char *name) {
    pthread_mutex_lock(&lock);
    if (!initialised) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    read_commands();
    if (hang_gpu < 0) maybe_hang(name, -1);
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t r) {
    pthread_mutex_unlock(&lock);
    return r;
}

/* A handle the driver no longer lists answers as a GPU fallen off the bus. */
#define DEVICE_CALL(name, device)                                  \
    nvmlReturn_t entered = enter(name);                            \
    if (entered != NVML_SUCCESS) return entered;                   \
    struct gpu *g = (struct gpu *)(device);                        \
    if (!g || g < gpus || g >= gpus + gpu_count) return leave(NVML_ERROR_INVALID_ARGUMENT); \
    if (hang_gpu >= 0) maybe_hang(name, g->index);                 \
    if (g->lost || !g->listed) return leave(NVML_ERROR_GPU_IS_LOST);

nvmlReturn_t nvmlInit_v2(void) {
    pthread_mutex_lock(&lock);
    const char *d = getenv("FLEXGATE_NVML_DOUBLE");
    if (!d || !*d) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_UNKNOWN;
    }
    snprintf(dir, sizeof dir, "%s", d);
    /* The driver outlives the processes that load its library: a record left by an earlier one
     * is what it holds now. */
    if (!load_driver()) {
        gpu_count = 0;
        commands_offset = 0;
        hang_name[0] = 0;
        hang_seconds = 0;
        hang_gpu = -1;
        if (!read_gpus()) {
            pthread_mutex_unlock(&lock);
            return NVML_ERROR_UNKNOWN;
        }
    }
    initialised = 1;
    read_commands();
    write_state();
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    initialised = 0;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t entered = enter("nvmlSystemGetDriverVersion");
    if (entered != NVML_SUCCESS) return entered;
    if (!version || length < 16) return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(version, length, "%s", "000.00-double");
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t entered = enter("nvmlSystemGetNVMLVersion");
    if (entered != NVML_SUCCESS) return entered;
    if (!version || length < 16) return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(version, length, "%s", "00.000.00-double");
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t entered = enter("nvmlDeviceGetCount");
    if (entered != NVML_SUCCESS) return entered;
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int listed = 0;
    for (unsigned int i = 0; i < gpu_count; i++) listed += gpus[i].listed ? 1 : 0;
    *count = listed;
    return leave(NVML_SUCCESS);
}

/* NVML's index counts the GPUs listed now: one that vanished shifts the later ones down. */
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    nvmlReturn_t entered = enter("nvmlDeviceGetHandleByIndex");
    if (entered != NVML_SUCCESS) return entered;
    if (!device) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int seen = 0;
    for (unsigned int i = 0; i < gpu_count; i++) {
        if (!gpus[i].listed) continue;
        if (seen++ == index) {
            if (gpus[i].lost) return leave(NVML_ERROR_GPU_IS_LOST);
            *device = &gpus[i];
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_INVALID_ARGUMENT);
}

static void uuid_of(const struct gpu *g, char *out, size_t size) {
    snprintf(out, size, "GPU-d0ub1e00-0000-0000-0000-%012d", g->index);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    nvmlReturn_t entered = enter("nvmlDeviceGetHandleByUUID");
    if (entered != NVML_SUCCESS) return entered;
    if (!uuid || !device) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int i = 0; i < gpu_count; i++) {
        char own[64];
        uuid_of(&gpus[i], own, sizeof own);
        if (!gpus[i].listed || strcmp(own, uuid) != 0) continue;
        if (gpus[i].lost) return leave(NVML_ERROR_GPU_IS_LOST);
        *device = &gpus[i];
        return leave(NVML_SUCCESS);
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetName", device)
    if (!name || length < strlen(g->model->name) + 1) return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(name, length, "%s", g->model->name);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetUUID", device)
    if (!uuid || length < 41) return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    uuid_of(g, uuid, length);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(void *device, unsigned int *minor) {
    DEVICE_CALL("nvmlDeviceGetMinorNumber", device)
    if (!minor) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *minor = (unsigned int)g->index;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *device, nvmlPciInfo_t *pci) {
    DEVICE_CALL("nvmlDeviceGetPciInfo", device)
    if (!pci) return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x18 + (unsigned int)g->index;
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
    pci->pciDeviceId = 0x233010de;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(void *device, unsigned int *min_mw, unsigned int *max_mw) {
    DEVICE_CALL("nvmlDeviceGetPowerManagementLimitConstraints", device)
    if (!min_mw || !max_mw) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *min_mw = g->min_mw;
    *max_mw = g->max_mw;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(void *device, unsigned int *limit) {
    DEVICE_CALL("nvmlDeviceGetPowerManagementDefaultLimit", device)
    if (!limit) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *limit = g->model->default_mw;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(void *device, unsigned int *limit) {
    DEVICE_CALL("nvmlDeviceGetPowerManagementLimit", device)
    if (!limit) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *limit = g->requested_mw;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *device, unsigned int *limit) {
    DEVICE_CALL("nvmlDeviceGetEnforcedPowerLimit", device)
    if (!limit) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *limit = enforced(g);
    return leave(NVML_SUCCESS);
}

/* Every set the driver answered with success, in order: `I asked_mw requested_mw_after`. */
static void log_set(const struct gpu *g, unsigned int asked_mw) {
    char path[1100];
    path_of(path, sizeof path, "sets");
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%d %u %u\n", g->index, asked_mw, g->requested_mw);
    fclose(f);
}

/* The driver checks a set against the GPU's real range (the model's), whatever it reports. */
nvmlReturn_t nvmlDeviceSetPowerManagementLimit(void *device, unsigned int limit) {
    DEVICE_CALL("nvmlDeviceSetPowerManagementLimit", device)
    if (!g->permission) return leave(NVML_ERROR_NO_PERMISSION);
    if (limit < g->model->min_mw || limit > g->model->max_mw) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->ignore_set) {
        g->requested_mw = (g->clamp_mw && limit < g->clamp_mw) ? g->clamp_mw : limit;
        write_state();
    }
    log_set(g, limit);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(void *device, unsigned int *power) {
    DEVICE_CALL("nvmlDeviceGetPowerUsage", device)
    if (!power) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int e = enforced(g);
    *power = g->reading_mw ? g->reading_mw : (g->draw_mw < e ? g->draw_mw : e);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *device, unsigned long long *energy) {
    DEVICE_CALL("nvmlDeviceGetTotalEnergyConsumption", device)
    if (!energy) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->no_energy) return leave(NVML_ERROR_NOT_SUPPORTED);
    /* one call per reading: a second's worth of the current draw, in mJ */
    unsigned int e = enforced(g);
    g->energy_mj += (g->draw_mw < e ? g->draw_mw : e);
    *energy = g->energy_mj;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(void *device, nvmlUtilization_t *utilization) {
    DEVICE_CALL("nvmlDeviceGetUtilizationRates", device)
    if (!utilization) return leave(NVML_ERROR_INVALID_ARGUMENT);
    utilization->gpu = 95;
    utilization->memory = 40;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(void *device, int *mode) {
    DEVICE_CALL("nvmlDeviceGetPersistenceMode", device)
    if (!mode) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *mode = g->persistence;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigMode(void *device, unsigned int *current, unsigned int *pending) {
    DEVICE_CALL("nvmlDeviceGetMigMode", device)
    if (!current || !pending) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *current = g->mig > 0 ? 1 : 0;
    *pending = *current;
    return leave(NVML_SUCCESS);
}

/* Every model here can be split into at most MAX_MIG MIG devices, in MIG mode or not. */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *device, unsigned int *count) {
    DEVICE_CALL("nvmlDeviceGetMaxMigDeviceCount", device)
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = MAX_MIG;
    return leave(NVML_SUCCESS);
}

/* The MIG devices (instances) that exist answer with a handle; the other slots NOT_FOUND, as
 * NVML's do; outside MIG mode there are none. */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *device, unsigned int index, void **mig_device) {
    DEVICE_CALL("nvmlDeviceGetMigDeviceHandleByIndex", device)
    if (!mig_device || index >= MAX_MIG) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->mig <= 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= (unsigned int)g->mig) return leave(NVML_ERROR_NOT_FOUND);
    *mig_device = &mig_handles[g - gpus][index];
    return leave(NVML_SUCCESS);
}
