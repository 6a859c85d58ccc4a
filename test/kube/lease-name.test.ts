// The Lease's name is built from the GatewayClass's: `sallyport-<class>`. A
// class name is a DNS subdomain of up to 253 characters, and so must a Lease's
// name be: a class name over 243 characters made a name the API server refuses
// (422), and no replica could ever lead (no status written). Longer names are
// cut and end with a short hash of the class name: the same name in every
// replica and across restarts, and two long class names sharing a prefix still
// get two Leases.
import './quiet.ts'
import t from 'tap'
import { leaseNameFor } from '../../lib/runtime/leader-election.ts'
import { createKubeMode } from '../../lib/runtime/kube-mode.ts'
import { clientFor, startFake, until } from './fixtures.ts'

const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

t.test('a Lease name is a valid DNS subdomain for any class name, and stable', async (t) => {
  t.equal(leaseNameFor('sallyport'), 'sallyport-sallyport', 'short names unchanged (no new Lease on upgrade)')
  t.equal(leaseNameFor('a'.repeat(243)), `sallyport-${'a'.repeat(243)}`, '253 characters: unchanged')
  const longs = ['a'.repeat(244), 'a'.repeat(253), `${'b'.repeat(240)}.c-${'d'.repeat(10)}`, `${'e'.repeat(241)}-${'f'.repeat(11)}`, `${'g'.repeat(241)}.${'h'.repeat(11)}`]
  for (const c of longs) {
    const name = leaseNameFor(c)
    t.match(name, DNS_SUBDOMAIN, `${c.length} characters: valid`)
    t.ok(name.length <= 253)
    t.equal(leaseNameFor(c), name, 'the same every time')
  }
  t.not(leaseNameFor(`${'x'.repeat(250)}-1`), leaseNameFor(`${'x'.repeat(250)}-2`), 'two class names cut to the same prefix get two Leases')
})

t.test('a replica of a class with a 253-character name leads', async (t) => {
  const fake = await startFake(t)
  const gatewayClass = `${'c'.repeat(200)}.${'d'.repeat(52)}`
  const kube = createKubeMode({ client: clientFor(fake), gatewayClass, debounceMs: 10, lease: { identity: 'a', namespace: 'sallyport-system', durationMs: 3000, renewDeadlineMs: 1500, retryPeriodMs: 200 } })
  t.teardown(() => kube.stop({ release: false }))
  kube.elector?.start()
  await until('leads', () => kube.elector?.isLeader() === true)
  const leases = fake.list('coordination.k8s.io/v1', 'Lease')
  t.equal(leases.length, 1)
  t.equal(leases[0]?.metadata.name, leaseNameFor(gatewayClass))
})
