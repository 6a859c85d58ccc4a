// DNS and destination-safety metrics (issue 5). Label values come from fixed
// lists: `result` ok|failure, `kind` from lib/upstream/dns.ts (nxdomain,
// nodata, servfail, refused, timeout, unreachable, other), `reason` from
// lib/address-ranges.ts and lib/upstream/destination-guard.ts; `backend` is the
// Cluster id (bounded by configuration).

import { Counter } from 'prom-client'
import { registry } from './metrics.ts'

export const dnsLookups = new Counter({
  name: 'sallyport_dns_lookups_total',
  help: 'DNS queries sent for backend hostnames (A, AAAA, PTR and PTR forward-confirmation), by result.',
  labelNames: ['type', 'result'] as const,
  registers: [registry],
})

export const dnsFailures = new Counter({
  name: 'sallyport_dns_failures_total',
  help: 'Failed DNS queries by kind (nxdomain, nodata, servfail, refused, timeout, unreachable, other).',
  labelNames: ['type', 'kind'] as const,
  registers: [registry],
})

export const dnsStaleAnswers = new Counter({
  name: 'sallyport_dns_stale_answers_total',
  help: 'Times an expired DNS answer was served while its refresh was under way or failing (bounded by --dns-stale-ttl).',
  registers: [registry],
})

export const dnsCacheEvictions = new Counter({
  name: 'sallyport_dns_cache_evictions_total',
  help: 'Names dropped from the DNS cache, least recently used first, to keep it within its bound (10000 names).',
  registers: [registry],
})

export const destinationRefusals = new Counter({
  name: 'sallyport_destination_refusals_total',
  help: 'Resolved addresses refused for a backend (loopback, private, link-local, cluster, denied, not-allowed, reverse-dns...).',
  labelNames: ['backend', 'reason'] as const,
  registers: [registry],
})
