/* SPDX-License-Identifier: MIT */
/* Monotonic milliseconds, for deadlines and durations. */
#ifndef NBRUN_CLOCK_H
#define NBRUN_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#endif
