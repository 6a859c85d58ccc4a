// Compile goldens: every fixtures/compile/<kind>-<situation>.in.yaml goes
// through the real pipeline (parseManifests → buildSnapshot → compile) and its
// table and status, as JSON, must equal <kind>-<situation>.out.json.
// After a deliberate change: SALLYPORT_UPDATE_GOLDENS=1 npx tap test/compile/golden.test.ts
// rewrites the outputs — then read the diff before committing it.
import t from 'tap'
import { createHash } from 'node:crypto'
import { readFileSync, readdirSync, writeFileSync, existsSync } from 'node:fs'
import path from 'node:path'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'
import { dumpStatus, dumpTable } from '../../lib/compile/print.ts'
import { createCa, serverCert } from '../helpers/pki.ts'

const DIR = path.join(import.meta.dirname, '../../fixtures/compile')
const UPDATE = process.env.SALLYPORT_UPDATE_GOLDENS === '1'
// Extension keys are HMACs under a key random per process (compile.ts
// extensionKeySecret): pinned here, so each run prints the same keys.
const OPTIONS = { now: 1700000000000, version: 1, gatewayClass: 'sallyport', extensionKeySecret: Buffer.alloc(32, 'golden') }

// Compile parses and matches certificates and keys, and no key is committed: an
// input names TEST-PKI-CERT, TEST-PKI-KEY (its key) and TEST-PKI-OTHER-KEY (a
// key of another certificate), minted per run, and the output shows those
// names again (TEST-PKI-ID for the certificate's id, a hash of both).
let minted: { cert: string; key: string; otherKey: string; id: string } | null = null

function testPki(): { cert: string; key: string; otherKey: string; id: string } {
  if (minted !== null) return minted
  const ca = createCa('golden CA')
  const leaf = serverCert(ca, ['api.example.com'])
  const id = createHash('sha256').update(leaf.certPem).update('\0').update(leaf.keyPem).digest('hex').slice(0, 16)
  return minted = { cert: leaf.certPem, key: leaf.keyPem, otherKey: ca.keyPem, id }
}

function withTestPki(yaml: string): string {
  if (!yaml.includes('TEST-PKI-')) return yaml
  const pki = testPki()
  const pem: Record<string, string> = { CERT: pki.cert, KEY: pki.key, 'OTHER-KEY': pki.otherKey }
  return yaml.replace(/\bTEST-PKI-(CERT|KEY|OTHER-KEY)\b/g, (_, k: string) => JSON.stringify(pem[k]))
}

function withoutTestPki(json: string): string {
  if (minted === null) return json
  return json.split(JSON.stringify(minted.cert)).join('"TEST-PKI-CERT"').split(`"${minted.id}"`).join('"TEST-PKI-ID"')
}

export function render(file: string): string {
  const name = path.basename(file)
  const parsed = parseManifests(name, withTestPki(readFileSync(file, 'utf8')))
  const snapshot = buildSnapshot(parsed.docs, parsed.problems)
  const { table, status } = compile(snapshot, OPTIONS)
  return withoutTestPki(JSON.stringify({ table: dumpTable(table), status: dumpStatus(status) }, null, 2) + '\n')
}

const inputs = readdirSync(DIR).filter(f => f.endsWith('.in.yaml')).sort()
t.ok(inputs.length >= 10, 'the golden corpus is present')

for (const input of inputs) {
  t.test(input, async t => {
    const outFile = path.join(DIR, input.replace(/\.in\.yaml$/, '.out.json'))
    const actual = render(path.join(DIR, input))
    // Private keys never reach a dump: dumpTable redacts keyPem.
    t.notMatch(actual, /PRIVATE KEY/, 'no key material in the dump')
    if (!UPDATE && !existsSync(outFile)) {
      t.fail(`${path.basename(outFile)} is missing: run with SALLYPORT_UPDATE_GOLDENS=1 and review it`)
      return
    }
    if (UPDATE) {
      writeFileSync(outFile, actual)
      t.pass(`wrote ${path.basename(outFile)}`)
      return
    }
    t.equal(actual, readFileSync(outFile, 'utf8'), `${path.basename(outFile)} (SALLYPORT_UPDATE_GOLDENS=1 rewrites)`)
  })
}
