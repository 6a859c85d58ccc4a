// Pool settings a cluster's BackendTrafficPolicy changes (issue 6): the TCP
// connect timeout (timeout.tcp.connectTimeout), the connection cap
// (circuitBreaker.maxConnections, split evenly over the cluster's endpoints,
// at least one each) and the requests per connection
// (circuitBreaker.maxRequestsPerConnection; 0 is no limit, as unset). Pools
// are shared by clusters with equal settings only: poolVariant() is part of
// the pool key.

import type { Cluster } from '../compile/table.ts'
import type { PoolSettings } from './pool.ts'

function connectionCap(cluster: Cluster): number | null {
  const max = cluster.circuitBreaker?.maxConnections ?? null
  if (max === null) return null
  return Math.max(1, Math.ceil(max / Math.max(1, cluster.endpoints.length)))
}

function requestsPerConnection(cluster: Cluster): number | null {
  const max = cluster.circuitBreaker?.maxRequestsPerConnection ?? null
  return max === null || max <= 0 ? null : max
}

/** The suffix of a pool key for non-default settings ('' when the cluster changes none). */
export function poolVariant(cluster: Cluster): string {
  const connect = cluster.connectTimeoutMs ?? null
  const cap = connectionCap(cluster)
  const perConnection = requestsPerConnection(cluster)
  if (connect === null && cap === null && perConnection === null) return ''
  return `|ct=${connect ?? ''}|mc=${cap ?? ''}|mr=${perConnection ?? ''}`
}

export function poolSettingsFor(cluster: Cluster, settings: PoolSettings): PoolSettings {
  const connect = cluster.connectTimeoutMs ?? null
  const cap = connectionCap(cluster)
  const perConnection = requestsPerConnection(cluster)
  if (connect === null && cap === null && perConnection === null) return settings
  return {
    ...settings,
    connectTimeoutMs: connect ?? settings.connectTimeoutMs,
    connectionsPerPool: cap === null ? settings.connectionsPerPool : Math.min(cap, settings.connectionsPerPool),
    maxRequestsPerConnection: perConnection ?? settings.maxRequestsPerConnection,
  }
}
