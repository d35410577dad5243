/* SPDX-License-Identifier: MIT */
/* Monotonic milliseconds, for deadlines and durations. */
#ifndef NBRUN_CLOCK_H
#define NBRUN_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t clock_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* pthread_cond_timedwait for at most ms from now (the condition's clock is CLOCK_REALTIME). */
static inline int clock_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return pthread_cond_timedwait(cond, mu, &ts);
}

#endif
