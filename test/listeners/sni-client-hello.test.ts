// The ClientHello parser against the regression corpus: each input whole, and
// fed in every split a TCP stream could deliver (one byte at a time, and at
// every prefix), which must say 'more' until the bytes that decide arrive.

import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { MAX_CLIENT_HELLO_BYTES, parseClientHello, type ClientHelloResult } from '../../lib/listeners/sni-client-hello.ts'

const DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'regression', 'client-hello')
type Expect = { sni: string | null } | { invalid: string } | { more: true }
const expected = JSON.parse(readFileSync(path.join(DIR, 'expect.json'), 'utf8')) as Record<string, Expect | string>

function asExpect(r: ClientHelloResult): Expect {
  return r.kind === 'hello' ? { sni: r.sni } : r.kind === 'invalid' ? { invalid: r.reason } : { more: true }
}

const files = readdirSync(DIR).filter((f) => f.endsWith('.bin')).sort()

t.test('every corpus file has an expectation and vice versa', async (t) => {
  const names = files.map((f) => f.replace(/\.bin$/, ''))
  t.same(names, Object.keys(expected).filter((k) => k !== '_').sort())
  t.ok(files.length >= 20)
})

for (const file of files) {
  const name = file.replace(/\.bin$/, '')
  t.test(name, async (t) => {
    const bytes = readFileSync(path.join(DIR, file))
    const want = expected[name] as Expect
    t.same(asExpect(parseClientHello(bytes)), want, 'whole')
    // Every prefix: 'more' until the decision, then the same decision (never a different one).
    let decidedAt = -1
    for (let n = 0; n <= bytes.length; n++) {
      const r = asExpect(parseClientHello(bytes.subarray(0, n)))
      if ('more' in r) { if (decidedAt !== -1) t.fail(`prefix ${n}: undecided after deciding at ${decidedAt}`); continue }
      if (decidedAt === -1) decidedAt = n
      if (JSON.stringify(r) !== JSON.stringify(want)) { t.fail(`prefix ${n}: ${JSON.stringify(r)}`); break }
    }
    if (!('more' in want)) t.ok(decidedAt > 0 && decidedAt <= bytes.length, `decided at byte ${decidedAt}`)
  })
}

t.test('random corruption never throws and never reads past the bound', async (t) => {
  const base = readFileSync(path.join(DIR, 'node-sni.bin'))
  let seed = 12345
  const rand = (n: number): number => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n }
  for (let i = 0; i < 2000; i++) {
    const b = Buffer.from(base)
    for (let k = 0; k < 1 + rand(4); k++) b[rand(b.length)] = rand(256)
    const cut = b.subarray(0, rand(b.length + 1))
    t.doesNotThrow(() => parseClientHello(cut))
  }
  const huge = Buffer.alloc(MAX_CLIENT_HELLO_BYTES + 10, 0)
  huge[0] = 22; huge[1] = 3; huge[2] = 1; huge.writeUInt16BE(16000, 3); huge[5] = 1; huge.writeUIntBE(16500, 6, 3)
  t.same(asExpect(parseClientHello(huge)), { invalid: 'too_large' }, 'a hello that would need more than the bound')
})

t.test('one trailing dot is dropped from the server name; a name of dots is refused', async (t) => {
  // trailing-dot.bin names `a.example.` as its last bytes: append a dot and grow each enclosing length by one.
  const base = readFileSync(path.join(DIR, 'trailing-dot.bin'))
  const grown = Buffer.concat([base, Buffer.from('.')])
  grown.writeUInt16BE(grown.readUInt16BE(3) + 1, 3) // record
  grown.writeUIntBE(grown.readUIntBE(6, 3) + 1, 6, 3) // handshake
  for (const at of [0x32, 0x36, 0x38, 0x3b]) grown.writeUInt16BE(grown.readUInt16BE(at) + 1, at) // extensions, SNI, list, name
  t.same(asExpect(parseClientHello(grown)), { invalid: 'bad_server_name' }, '`a.example..` is no name')
})
