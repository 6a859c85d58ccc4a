// The SPIFFE ID of a verified client certificate, read from node's
// subjectaltname text (X.509-SVID: exactly one URI SAN names the workload).

import t from 'tap'
import { X509Certificate } from 'node:crypto'
import { spiffeIdOf } from '../../lib/extensions/client.ts'
import { clientCert, createCa } from '../helpers/pki.ts'

const ca = createCa('workload CA')
const sanOf = (uris: readonly string[], dns: readonly string[] = []): string | undefined =>
  new X509Certificate(clientCert(ca, 'w', { uris, dns }).certPem).subjectAltName

t.test('one spiffe:// URI SAN is the identity, beside DNS names and other kinds', async (t) => {
  t.equal(spiffeIdOf(sanOf(['spiffe://td/ns/team-a/sa/app'], ['app.example.test'])), 'spiffe://td/ns/team-a/sa/app')
  t.equal(spiffeIdOf(sanOf([], ['app.example.test'])), null, 'none')
  t.equal(spiffeIdOf(undefined), null)
})

t.test('a URI SAN whose value holds ", URI:spiffe://..." names no one (node quotes it)', async (t) => {
  t.equal(spiffeIdOf(sanOf(['spiffe://td/ns/team-a/sa/x, URI:spiffe://td/ns/admin/sa/root, DNS:y'])), null)
})

t.test('two spiffe:// URI SANs name no one: X.509-SVID has exactly one, and the first is no better than the second', async (t) => {
  // The first was taken: which identity a certificate stood for hung on the order its CA wrote them in.
  t.equal(spiffeIdOf(sanOf(['spiffe://td/ns/team-a/sa/app', 'spiffe://td/ns/admin/sa/root'])), null)
})
