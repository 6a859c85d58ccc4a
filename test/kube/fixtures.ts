// Shared pieces of the Kubernetes tests: a fake API server serving every kind
// sallyport watches (plus Leases and Events), a client pointed at it, and
// object builders for a Gateway, HTTPRoutes and Backends on loopback upstreams.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import type { Test } from 'tap'
import { KubeClient } from '../../lib/config/kube-client.ts'
import { KUBE_RESOURCES } from '../../lib/config/kube-resources.ts'
import { FakeApiServer, type ResourceDef } from '../helpers/fake-apiserver.ts'

export const FAKE_RESOURCES: ResourceDef[] = [
  ...KUBE_RESOURCES.map((r) => ({ group: r.group, version: r.versions[0] as string, plural: r.plural, kind: r.kind, namespaced: r.namespaced })),
  { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', namespaced: true },
  { group: '', version: 'v1', plural: 'events', kind: 'Event', namespaced: true },
]

export async function startFake(t: Test, bookmarkIntervalMs = 0): Promise<FakeApiServer> {
  const fake = new FakeApiServer(FAKE_RESOURCES)
  await fake.start(bookmarkIntervalMs)
  t.teardown(() => fake.stop())
  return fake
}

/** A client of the fake server; `token`: its bearer token, so `fake.hang()` can single out this client's requests. */
export function clientFor(fake: FakeApiServer, token = 'fake-token'): KubeClient {
  const kc = new KubeConfig()
  kc.loadFromString(fake.kubeconfig().replace('token: fake-token', `token: ${token}`))
  return new KubeClient(kc)
}

export function kubeconfigFile(t: Test, fake: FakeApiServer): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-kube-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'kubeconfig')
  fs.writeFileSync(file, fake.kubeconfig())
  return file
}

export function gatewayClass(): Record<string, unknown> {
  return { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'GatewayClass', metadata: { name: 'sallyport' }, spec: { controllerName: 'sallyport.io/gateway-controller' } }
}

export function gateway(port: number): Record<string, unknown> {
  return {
    // Upstreams are on loopback, which the destination guard refuses unless allowed.
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'egress', namespace: 'default', annotations: { 'sallyport.io/allow-destination-cidrs': '127.0.0.0/8' } },
    spec: { gatewayClassName: 'sallyport', listeners: [{ name: 'http', protocol: 'HTTP', port }] },
  }
}

export function backend(name: string, port: number, namespace = 'default'): Record<string, unknown> {
  return {
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name, namespace },
    spec: { endpoints: [{ ip: { address: '127.0.0.1', port } }] },
  }
}

export function route(name: string, hostname: string, backendName: string, port: number, extra: { namespace?: string; labels?: Record<string, string>; path?: string } = {}): Record<string, unknown> {
  return {
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute',
    metadata: { name, namespace: extra.namespace ?? 'default', ...(extra.labels === undefined ? {} : { labels: extra.labels }) },
    spec: {
      parentRefs: [{ name: 'egress', namespace: 'default' }],
      hostnames: [hostname],
      rules: [{
        ...(extra.path === undefined ? {} : { matches: [{ path: { type: 'PathPrefix', value: extra.path } }] }),
        backendRefs: [{ group: 'gateway.envoyproxy.io', kind: 'Backend', name: backendName, namespace: 'default', port }],
      }],
    },
  }
}

export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs
  while (Date.now() < end) {
    if (await check()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`timed out waiting for ${what}`)
}
