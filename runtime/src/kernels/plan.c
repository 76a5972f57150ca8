/* The plan cache: a bounded LRU map from a byte key (op, dtypes, geometry) to a small plan
 * value. Shared by the kernel launchers; cleared by vnc_plan_cache_clear (empty_cache). */
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "plan.h"

#define NBUCKETS 8192

typedef struct entry {
  struct entry *hnext;        /* hash chain */
  struct entry *prev, *next;  /* LRU list, most recent first */
  uint64_t hash;
  size_t klen, vlen;
  unsigned char data[];       /* key bytes, then value bytes */
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry *buckets[NBUCKETS];
static entry *lru_head, *lru_tail;
static int64_t capacity = -1, count, hits, misses, evictions;

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void lru_unlink(entry *e) {
  if (e->prev) e->prev->next = e->next; else lru_head = e->next;
  if (e->next) e->next->prev = e->prev; else lru_tail = e->prev;
  e->prev = e->next = NULL;
}

static void lru_push_front(entry *e) {
  e->prev = NULL;
  e->next = lru_head;
  if (lru_head) lru_head->prev = e;
  lru_head = e;
  if (!lru_tail) lru_tail = e;
}

static void hash_remove(entry *e) {
  entry **pp = &buckets[e->hash % NBUCKETS];
  while (*pp && *pp != e) pp = &(*pp)->hnext;
  if (*pp) *pp = e->hnext;
}

static void ensure_capacity(void) {
  if (capacity >= 0) return;
  const char *env = getenv("TORCH_NEURONX_PLAN_CACHE_SIZE");
  long long v = env ? atoll(env) : 0;
  capacity = v > 0 ? v : 4096;
}

int vnc_plan_get(const void *key, size_t klen, void *value, size_t vlen) {
  uint64_t h = fnv1a(key, klen);
  pthread_mutex_lock(&lock);
  ensure_capacity();
  for (entry *e = buckets[h % NBUCKETS]; e; e = e->hnext) {
    if (e->hash == h && e->klen == klen && e->vlen == vlen && memcmp(e->data, key, klen) == 0) {
      memcpy(value, e->data + klen, vlen);
      lru_unlink(e);
      lru_push_front(e);
      hits++;
      pthread_mutex_unlock(&lock);
      return 1;
    }
  }
  misses++;
  pthread_mutex_unlock(&lock);
  return 0;
}

void vnc_plan_put(const void *key, size_t klen, const void *value, size_t vlen) {
  entry *e = malloc(sizeof(entry) + klen + vlen);
  if (!e) return; /* caching is an optimisation only */
  e->hash = fnv1a(key, klen);
  e->klen = klen;
  e->vlen = vlen;
  memcpy(e->data, key, klen);
  memcpy(e->data + klen, value, vlen);
  pthread_mutex_lock(&lock);
  ensure_capacity();
  e->hnext = buckets[e->hash % NBUCKETS];
  buckets[e->hash % NBUCKETS] = e;
  lru_push_front(e);
  count++;
  while (count > capacity && lru_tail) {
    entry *old = lru_tail;
    lru_unlink(old);
    hash_remove(old);
    free(old);
    count--;
    evictions++;
  }
  pthread_mutex_unlock(&lock);
}

void vnc_plan_cache_get_stats(vnc_plan_cache_stats *out) {
  pthread_mutex_lock(&lock);
  ensure_capacity();
  out->hits = hits;
  out->misses = misses;
  out->entries = count;
  out->evictions = evictions;
  out->capacity = capacity;
  pthread_mutex_unlock(&lock);
}

void vnc_plan_cache_clear(void) {
  pthread_mutex_lock(&lock);
  while (lru_head) {
    entry *e = lru_head;
    lru_unlink(e);
    free(e);
  }
  memset(buckets, 0, sizeof buckets);
  count = 0;
  pthread_mutex_unlock(&lock);
}
