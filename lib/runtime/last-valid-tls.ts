// A kubernetes.io/tls Secret rotated to material TLS cannot use (a key of
// another certificate, a PEM body cut short, an encrypted key) keeps its last
// valid version in the snapshot compiled, with a warning saying so: a bad
// rotation must not take down the listeners (or Backend client certificates)
// that served with the previous one, as Envoy keeps a listener's last good
// certificate when an SDS update is rejected. A Secret that was never valid
// is compiled as it is (InvalidCertificateRef), and a deleted one is gone: a
// removal is deliberate, not a failed rotation.

import type { ConfigProblem } from '../resources/problem.ts'
import type { Secret } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import { tlsSecretFault } from '../compile/tls-material.ts'

const TLS_TYPE = 'kubernetes.io/tls'

/**
 * `next` with each kubernetes.io/tls Secret that the last compile read
 * (`referenced`), that was valid in `previous` (the snapshot that compile
 * had, itself kept this way) and whose new material TLS cannot use replaced
 * by that previous version, and a warning per replacement; `next` itself when
 * there is none. Only changed, referenced Secrets are checked: Kubernetes mode
 * watches every Secret of the cluster.
 */
export function keepLastValidTls(previous: Snapshot | null, referenced: (key: string) => boolean, next: Snapshot): Snapshot {
  if (previous === null || previous.secrets === next.secrets) return next
  let secrets: Map<string, Secret> | null = null
  const problems: ConfigProblem[] = []
  for (const [key, secret] of next.secrets) {
    const before = previous.secrets.get(key)
    if (before === undefined || before === secret || secret.type !== TLS_TYPE || before.type !== TLS_TYPE || !referenced(key)) continue
    const fault = tlsSecretFault(secret)
    if (fault === null || tlsSecretFault(before) !== null) continue
    secrets ??= new Map(next.secrets)
    secrets.set(key, before)
    problems.push({
      source: secret.source, kind: 'Secret', namespace: secret.meta.namespace, name: secret.meta.name, field: fault.field,
      message: `${fault.message}; the last valid version keeps serving`, severity: 'warning',
    })
  }
  if (secrets === null) return next
  return { ...next, secrets, problems: [...next.problems, ...problems] }
}
