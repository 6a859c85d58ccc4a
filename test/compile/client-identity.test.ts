// Which Pod a source address identifies (the table's client map: access log
// fields, Authorization, RateLimit keys). An address stands for one Pod's
// namespace and service account, or for nobody when that is not certain.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { parseManifests } from '../../lib/config/parse.ts'
import * as b from './builders.ts'

function pod(ns: string, name: string, sa: string, status: string, extra = ''): string {
  return `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: ${ns}}
spec: {serviceAccountName: ${sa}${extra}, containers: [{name: c, image: x}]}
status: ${status}
---
`
}

t.test('an address identifies the one live Pod that holds it, or nobody', async (t) => {
  const yaml = [
    pod('team-a', 'api', 'api', '{phase: Running, podIP: 10.0.0.1}'),
    // A finished Job's Pod keeps its IP in status; the IP went back to the pool and is now another Pod's.
    pod('batch', 'job-1', 'admin', '{phase: Succeeded, podIP: 10.0.0.2}'),
    pod('team-b', 'web', 'web', '{phase: Running, podIP: 10.0.0.2}'),
    pod('batch', 'job-2', 'admin', '{phase: Failed, podIPs: [{ip: 10.0.0.3}]}'),
    // hostNetwork Pods carry their node's IP: anything on the node sends from it.
    pod('kube-system', 'agent', 'privileged', '{phase: Running, podIP: 192.168.1.10}', ', hostNetwork: true'),
    // Two live Pods of different identities claim one IP (a stale object, a misbehaving CNI): nobody.
    pod('team-c', 'x', 'x', '{phase: Running, podIP: 10.0.0.4}'),
    pod('team-d', 'y', 'y', '{phase: Running, podIP: 10.0.0.4}'),
    // Two Pods of one identity on one IP: still that identity.
    pod('team-e', 'p1', 'svc', '{phase: Running, podIP: 10.0.0.5}'),
    pod('team-e', 'p2', 'svc', '{phase: Pending, podIP: 10.0.0.5}'),
  ].join('')
  const snapshot = buildSnapshot(parseManifests('pods.yaml', yaml).docs)
  t.same(snapshot.problems, [])
  const { table } = compile(snapshot, b.opts)
  const who = (ip: string): string | null => {
    const id = table.clients.get(ip)
    return id === undefined ? null : `${id.namespace}/${id.serviceAccount}`
  }
  t.equal(who('10.0.0.1'), 'team-a/api')
  t.equal(who('10.0.0.2'), 'team-b/web', "a finished Pod's released IP is the live Pod's")
  t.equal(who('10.0.0.3'), null, 'a failed Pod identifies nobody')
  t.equal(who('192.168.1.10'), null, 'a hostNetwork Pod identifies nobody')
  t.equal(who('10.0.0.4'), null, 'an IP two identities claim identifies nobody')
  t.equal(who('10.0.0.5'), 'team-e/svc', 'two Pods of one identity')
})
