/* vmm/share: shared exports and their registry (design in share.h). */
#include "vmm/share.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x7873616c6c6f6372ull /* "xsallocr" */
#define HEADER 2                    /* words before fd 0's */
#define MIN_WORDS 64

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "registry words are read by other processes: lock-free atomics only");

static struct {
    pthread_mutex_t lock;
    int fd;                 /* the registry's memfd, -1 while no export is open */
    pid_t pid;              /* the process that created it */
    _Atomic uint64_t *words;
    size_t n_words;
    size_t open;            /* nonzero words */
    uint64_t next_id;       /* 0 until the first registry */
} R = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* A forked child inherits the parent's registry mapping (shared) and fds:
 * it lets go of the registry without touching a word, and its inherited
 * exports are then fds like any other. Called with the lock held. */
static void leave_parents_registry(void) {
    if (R.fd < 0 || R.pid == getpid()) return;
    munmap((void *)R.words, R.n_words * sizeof(uint64_t));
    close(R.fd);
    R.fd = -1, R.words = NULL, R.n_words = 0, R.open = 0;
}

static uint64_t random_u64(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_sec;
    }
    return x | 1; /* never 0, which means "none" */
}

/* Makes the registry hold words [0, need); false if the host refuses. */
static bool reserve_words(size_t need) {
    if (need <= R.n_words) return true;
    size_t n = R.n_words ? R.n_words : MIN_WORDS;
    while (n < need) n *= 2;
    size_t bytes = n * sizeof(uint64_t);
    if (R.fd < 0) {
        int fd = memfd_create("xsa-share-registry", MFD_CLOEXEC);
        void *m = fd >= 0 && ftruncate(fd, (off_t)bytes) == 0
                      ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
        if (m == MAP_FAILED) {
            if (fd >= 0) close(fd);
            return false;
        }
        if (!R.next_id) R.next_id = random_u64();
        R.fd = fd, R.pid = getpid(), R.words = m, R.n_words = n;
        atomic_store(&R.words[1], random_u64());
        atomic_store(&R.words[0], MAGIC);
        return true;
    }
    void *m = ftruncate(R.fd, (off_t)bytes) == 0
                  ? mremap((void *)R.words, R.n_words * sizeof(uint64_t), bytes, MREMAP_MAYMOVE)
                  : MAP_FAILED;
    if (m == MAP_FAILED) return false;
    R.words = m, R.n_words = n;
    return true;
}

/* Called with the lock held, after the last registered fd closed. */
static void drop_registry(void) {
    munmap((void *)R.words, R.n_words * sizeof(uint64_t));
    close(R.fd);
    R.fd = -1, R.words = NULL, R.n_words = 0;
}

xsa_cu_result xsa_share_export(xsa_driver *d, xsa_mem_handle h, int *fd, uint64_t *id) {
    pthread_mutex_lock(&R.lock);
    leave_parents_registry();
    int got = -1;
    xsa_cu_result r = XSA_DRV(d, mem_export_fd, &got, h);
    if (r == XSA_CU_SUCCESS && (got < 0 || !reserve_words(HEADER + (size_t)got + 1))) {
        if (got >= 0) close(got);
        r = XSA_CU_ERROR_OUT_OF_MEMORY;
    }
    if (r == XSA_CU_SUCCESS) {
        *fd = got;
        *id = R.next_id++;
        if (!R.next_id) R.next_id = 1;
        atomic_store(&R.words[HEADER + got], *id);
        R.open++;
    } else if (!R.open && R.fd >= 0) {
        drop_registry();
    }
    pthread_mutex_unlock(&R.lock);
    return r;
}

void xsa_share_close(int fd) {
    pthread_mutex_lock(&R.lock);
    leave_parents_registry();
    /* Cleared first: an importer that reads the word after this cannot
     * take the fd's later use for this export. */
    bool registered = fd >= 0 && HEADER + (size_t)fd < R.n_words && atomic_exchange(&R.words[HEADER + fd], 0);
    close(fd);
    if (registered && --R.open == 0) drop_registry();
    pthread_mutex_unlock(&R.lock);
}

uint64_t xsa_share_id(int fd) {
    pthread_mutex_lock(&R.lock);
    leave_parents_registry();
    uint64_t id = fd >= 0 && HEADER + (size_t)fd < R.n_words ? atomic_load(&R.words[HEADER + fd]) : 0;
    pthread_mutex_unlock(&R.lock);
    return id;
}

bool xsa_share_registry(int *fd, uint64_t *id) {
    pthread_mutex_lock(&R.lock);
    leave_parents_registry();
    bool open = R.fd >= 0;
    if (open) *fd = R.fd, *id = atomic_load(&R.words[1]);
    pthread_mutex_unlock(&R.lock);
    return open;
}

int xsa_share_check(char *err, size_t errlen) {
    pthread_mutex_lock(&R.lock);
    leave_parents_registry();
    size_t nonzero = 0;
    for (size_t i = HEADER; i < R.n_words; i++) nonzero += atomic_load(&R.words[i]) != 0;
    const char *why = (R.fd >= 0) != (R.open > 0)                        ? "is open without exports, or the reverse"
                      : R.fd >= 0 && atomic_load(&R.words[0]) != MAGIC   ? "has lost its magic"
                      : R.fd >= 0 && !atomic_load(&R.words[1])           ? "has no id"
                      : nonzero != R.open                                ? "counts its registered fds wrong"
                                                                         : NULL;
    if (why) snprintf(err, errlen, "share registry (fd %d, %zu open, %zu registered): %s", R.fd, R.open, nonzero, why);
    pthread_mutex_unlock(&R.lock);
    return why == NULL;
}

bool xsa_share_view_open(xsa_share_view *v, int fd, uint64_t id) {
    *v = (xsa_share_view){0};
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)(HEADER * sizeof(uint64_t)) ||
        st.st_size % sizeof(uint64_t))
        return false;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return false;
    v->words = m;
    v->n_words = (size_t)st.st_size / sizeof(uint64_t);
    if (atomic_load(&v->words[0]) == MAGIC && atomic_load(&v->words[1]) == id) return true;
    xsa_share_view_close(v);
    return false;
}

bool xsa_share_view_has(const xsa_share_view *v, int fd, uint64_t id) {
    return fd >= 0 && HEADER + (size_t)fd < v->n_words && atomic_load(&v->words[HEADER + fd]) == id;
}

void xsa_share_view_close(xsa_share_view *v) {
    if (v->words) munmap((void *)v->words, v->n_words * sizeof(uint64_t));
    *v = (xsa_share_view){0};
}
