/* SPDX-License-Identifier: MIT */
/* The way out of a sandbox given an allow-list, on the Docker engine (egress-docker.c). */
#ifndef NBRUN_EGRESS_H
#define NBRUN_EGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#define NBRUN_EGRESS_IMAGE "nbrun-egress"
#define NBRUN_EGRESS_NETWORK "nbrun-egress"
#define NBRUN_EGRESS_PROXY "nbrun-egress-proxy"
#define NBRUN_EGRESS_LABEL "nbrun.egress"
#define NBRUN_EGRESS_POLICY_DIR "/run/nbrun-policy"
/* Where the relay's socket (and the CA bundle) are: the relay's and the sandbox's mount. */
#define NBRUN_EGRESS_SOCKET_DIR "/run/nbrun-egress"
/* Where the agent listens for the kernel's proxied connections. */
#define NBRUN_EGRESS_PROXY_URL "http://127.0.0.1:3128"

struct nbrun__docker;
struct nbrun_ctx;
struct nbrun__sandbox_spec;

/* One sandbox's relay, volume and policy. */
struct nbrun__egress {
	char relay[64];   /* container name */
	char volume[64];
	char addr[64];    /* the relay's address on the egress network */
	bool have_relay, have_volume, have_policy;
};

/*
 * The way out of sandbox id under spec's policy: the proxy, then the relay
 * (labelled with labels) and its volume, then the policy for the relay's
 * address. On failure what was made is in e for nbrun__egress_teardown().
 */
int nbrun__egress_setup(struct nbrun__egress *e, struct nbrun__docker *d, struct nbrun_ctx *ctx,
			const char *id, json_t *labels, const struct nbrun__sandbox_spec *spec);
/* What the relay logged of its connections, as the result's "network" (less its "allow"). */
json_t *nbrun__egress_report(struct nbrun__egress *e, struct nbrun__docker *d, uint64_t cap);
/* The policy emptied, the relay and its volume removed; errors ignored. */
void nbrun__egress_teardown(struct nbrun__egress *e, struct nbrun__docker *d, struct nbrun_ctx *ctx);

/* The proxy and its network removed when no relay is left (nbrun gc, a server's exit). */
int nbrun__egress_release(struct nbrun__docker *d, struct nbrun_ctx *ctx);

#endif
