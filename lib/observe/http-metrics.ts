// Downstream HTTP metrics. Labels are bounded: route is the route's ns/name
// ('' when none matched), backend the cluster id, code the exact status,
// namespace/service_account the client's identity from table.clients ('' when unknown).

import { Counter, Gauge, Histogram } from 'prom-client'
import { registry } from './metrics.ts'

export const downstreamRequests = new Counter({
  name: 'sallyport_downstream_requests_total', help: 'Requests answered on the data plane, by final status code.',
  labelNames: ['gateway', 'listener', 'route', 'backend', 'namespace', 'service_account', 'code'] as const, registers: [registry],
})
export const downstreamDuration = new Histogram({
  name: 'sallyport_downstream_request_duration_seconds', help: 'Time from request arrival to the end of the response.',
  labelNames: ['gateway', 'route', 'backend'] as const,
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
})
export const downstreamBytesReceived = new Counter({
  name: 'sallyport_downstream_bytes_received_total', help: 'Request bytes received from clients.',
  labelNames: ['gateway', 'route'] as const, registers: [registry],
})
export const downstreamBytesSent = new Counter({
  name: 'sallyport_downstream_bytes_sent_total', help: 'Response body bytes sent to clients.',
  labelNames: ['gateway', 'route'] as const, registers: [registry],
})
export const downstreamActiveConnections = new Gauge({
  name: 'sallyport_downstream_active_connections', help: 'Open client connections by listening port.',
  labelNames: ['port'] as const, registers: [registry],
})
export const downstreamActiveStreams = new Gauge({
  name: 'sallyport_downstream_active_streams', help: 'Requests (HTTP/1.1 exchanges and HTTP/2 streams) in flight.',
  registers: [registry],
})

export interface RequestSample {
  readonly gateway: string
  readonly listener: string
  readonly route: string
  readonly backend: string
  readonly namespace: string
  readonly serviceAccount: string
  readonly status: number
  readonly seconds: number
  readonly bytesIn: number
  readonly bytesOut: number
}

// hot path
/** Records one finished request in every request metric. */
export function recordRequest(s: RequestSample): void {
  downstreamRequests.inc({
    gateway: s.gateway, listener: s.listener, route: s.route, backend: s.backend,
    namespace: s.namespace, service_account: s.serviceAccount, code: s.status,
  })
  downstreamDuration.observe({ gateway: s.gateway, route: s.route, backend: s.backend }, s.seconds)
  if (s.bytesIn > 0) downstreamBytesReceived.inc({ gateway: s.gateway, route: s.route }, s.bytesIn)
  if (s.bytesOut > 0) downstreamBytesSent.inc({ gateway: s.gateway, route: s.route }, s.bytesOut)
}
