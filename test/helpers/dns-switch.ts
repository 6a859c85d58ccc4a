// A DNS relay for resolver-outage tests: a UDP server on 127.0.0.1 that
// forwards each query to a real DNS server (dnsmasq) while it is set to
// `pass`, and otherwise drops it (`silent`: a resolver that stopped answering,
// the c-ares query times out) or answers it SERVFAIL itself (`servfail`).
// The mode can be set for every query, for one name, or for one record type
// (AAAA only, say). It counts the queries it received per name and type, so a
// test can see how often the gateway asked.

import dgram from 'node:dgram'
import type { Test } from 'tap'

export type DnsMode = 'pass' | 'silent' | 'servfail'

export interface DnsSwitch {
  /** `127.0.0.1:PORT`, for --dns-server or DnsClient servers. */
  readonly server: string
  /** Sets the mode for queries of `name` and `type` (A, AAAA); with neither, for every query (narrower settings cleared). */
  set(mode: DnsMode, match?: { name?: string; type?: 'A' | 'AAAA' }): void
  /** Queries received (whatever was done with them) for `name` and `type`, or all. */
  queries(name?: string, type?: 'A' | 'AAAA'): number
}

const TYPES: Readonly<Record<number, string>> = { 1: 'A', 28: 'AAAA', 12: 'PTR' }

/** Name and type of a DNS query message; null when it cannot be read. */
function question(m: Buffer): { name: string; type: string } | null {
  if (m.length < 12) return null
  const labels: string[] = []
  let at = 12
  while (at < m.length) {
    const len = m[at]
    if (len === 0) break
    if (len > 63 || at + 1 + len > m.length) return null
    labels.push(m.toString('latin1', at + 1, at + 1 + len))
    at += 1 + len
  }
  if (at + 3 > m.length) return null
  return { name: labels.join('.').toLowerCase(), type: TYPES[m.readUInt16BE(at + 1)] ?? String(m.readUInt16BE(at + 1)) }
}

/** A relay in front of `upstream` (`127.0.0.1:PORT`, a dnsmasq's `server`). */
export async function startDnsSwitch(t: Test, upstream: string): Promise<DnsSwitch> {
  const [upHost, upPort] = upstream.split(':') as [string, string]
  const front = dgram.createSocket('udp4')
  const back = dgram.createSocket('udp4')
  const rules = new Map<string, DnsMode>()
  const counts = new Map<string, number>()
  /** Relayed query id → who asked (ids come from c-ares, random per query). */
  const waiting = new Map<number, { port: number; address: string }>()

  const modeOf = (name: string, type: string): DnsMode =>
    rules.get(`${name}|${type}`) ?? rules.get(`${name}|`) ?? rules.get(`|${type}`) ?? rules.get('|') ?? 'pass'

  front.on('message', (m, from) => {
    const q = question(m)
    if (q === null) return
    for (const k of [`${q.name}|${q.type}`, `${q.name}|`, `|${q.type}`, '|']) counts.set(k, (counts.get(k) ?? 0) + 1)
    const mode = modeOf(q.name, q.type)
    if (mode === 'silent') return
    if (mode === 'servfail') {
      // The query echoed back as a response: QR set, recursion available, RCODE 2.
      const out = Buffer.from(m)
      out[2] = 0x80 | (m[2] & 0x79)
      out[3] = 0x82
      front.send(out, from.port, from.address)
      return
    }
    waiting.set(m.readUInt16BE(0), { port: from.port, address: from.address })
    back.send(m, Number(upPort), upHost)
  })
  back.on('message', (m) => {
    if (m.length < 2) return
    const id = m.readUInt16BE(0)
    const to = waiting.get(id)
    if (to === undefined) return
    waiting.delete(id)
    front.send(m, to.port, to.address)
  })
  await new Promise<void>((resolve) => front.bind(0, '127.0.0.1', resolve))
  await new Promise<void>((resolve) => back.bind(0, '127.0.0.1', resolve))
  t.teardown(() => { front.close(); back.close() })

  return {
    server: `127.0.0.1:${front.address().port}`,
    set(mode, match = {}) {
      if (match.name === undefined && match.type === undefined) rules.clear()
      rules.set(`${match.name ?? ''}|${match.type ?? ''}`, mode)
    },
    queries(name, type) {
      return counts.get(`${name ?? ''}|${type ?? ''}`) ?? 0
    },
  }
}
