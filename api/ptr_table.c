/* api/ptr_table: sharded pointer -> device table (design in ptr_table.h). */
#include "api/ptr_table.h"

#include <pthread.h>

#include "pool/ptr_map.h"

#define SHARDS 64

static struct shard {
    pthread_mutex_t lock;
    xsa_ptr_map map;
    char pad[64]; /* keep shards on separate cache lines */
} shards[SHARDS];

static struct shard *shard_of(uintptr_t ptr) { return &shards[(ptr >> 9) * 0x9E3779B97F4A7C15ull >> 58]; }

bool xsa_ptr_table_init(void) {
    for (int i = 0; i < SHARDS; i++) {
        pthread_mutex_init(&shards[i].lock, NULL);
        if (!xsa_ptr_map_init(&shards[i].map)) {
            while (i-- > 0) xsa_ptr_map_destroy(&shards[i].map);
            return false;
        }
    }
    return true;
}

void xsa_ptr_table_destroy(void) {
    for (int i = 0; i < SHARDS; i++) {
        xsa_ptr_map_destroy(&shards[i].map);
        pthread_mutex_destroy(&shards[i].lock);
    }
}

/* Devices are stored as value device+1 so that device 0 is not NULL. */
bool xsa_ptr_table_insert(uintptr_t ptr, int device) {
    struct shard *s = shard_of(ptr);
    pthread_mutex_lock(&s->lock);
    bool ok = xsa_ptr_map_insert(&s->map, ptr, (void *)(uintptr_t)(device + 1));
    pthread_mutex_unlock(&s->lock);
    return ok;
}

int xsa_ptr_table_lookup(uintptr_t ptr) {
    struct shard *s = shard_of(ptr);
    pthread_mutex_lock(&s->lock);
    uintptr_t v = (uintptr_t)xsa_ptr_map_get(&s->map, ptr);
    pthread_mutex_unlock(&s->lock);
    return (int)v - 1;
}

int xsa_ptr_table_remove(uintptr_t ptr) {
    struct shard *s = shard_of(ptr);
    pthread_mutex_lock(&s->lock);
    uintptr_t v = (uintptr_t)xsa_ptr_map_remove(&s->map, ptr);
    pthread_mutex_unlock(&s->lock);
    return (int)v - 1;
}
