// Forward-proxy mode (issue 9): refused CONNECTs by reason. Tunnels that open
// are counted like TCP/TLS listener connections (l4-metrics.ts: bytes,
// durations, how they ended), with the HTTP listener's name.

import { Counter } from 'prom-client'
import { registry } from './metrics.ts'

export const forwardProxyRefusals = new Counter({
  name: 'sallyport_forward_proxy_refusals_total',
  help: 'CONNECT requests refused (no route, CONNECT or port not allowed by the route, destination policy, SNI mismatch, unreachable), by reason.',
  labelNames: ['reason'] as const,
  registers: [registry],
})
