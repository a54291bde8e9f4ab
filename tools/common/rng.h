/* The tools' seeded generators, once: splitmix64 (a counter mixed, so any element can be
 * recomputed from its index), xorshift64* and the FNV-1a hash of a name (a stream per case or
 * tensor). Quality is not the point: reproducible inputs for a seed are. */
#ifndef VKH2O_RNG_H
#define VKH2O_RNG_H

#include <stdint.h>

#define RNG_GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's output for the state x (the state before its step) */
static inline uint64_t rng_mix(uint64_t x)
{
    x += RNG_GOLDEN;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* splitmix64: the next number of the stream *s */
static inline uint64_t rng_next(uint64_t* s)
{
    const uint64_t z = rng_mix(*s);
    *s += RNG_GOLDEN;
    return z;
}

/* xorshift64*: the next number of the stream *s (a nonzero state) */
static inline uint64_t rng_xorshift(uint64_t* s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

/* FNV-1a of a string */
static inline uint64_t rng_hash(const char* name)
{
    uint64_t h = 1469598103934665603ull;
    for (const char* p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

#endif
