// Summarizes a V8 .cpuprofile (from `node --cpu-prof`): self time per function
// and per file, so the data-path owners get concrete hotspots, not a flame graph.

import { readFileSync } from 'node:fs'
import path from 'node:path'

interface CallFrame { readonly functionName: string; readonly url: string; readonly lineNumber: number }
interface ProfileNode { readonly id: number; readonly callFrame: CallFrame; readonly hitCount?: number }
interface CpuProfile { readonly nodes: readonly ProfileNode[]; readonly startTime: number; readonly endTime: number; readonly samples?: readonly number[] }

/** selfPct: share of the busy (non-idle) samples, so a mostly idle process still shows where its work went. */
export interface Hotspot { readonly name: string; readonly selfPct: number; readonly selfMs: number }
export interface ProfileSummary {
  readonly file: string
  readonly totalMs: number
  readonly idlePct: number
  readonly functions: readonly Hotspot[]
  readonly files: readonly Hotspot[]
}

export function shortUrl(url: string, root: string): string {
  if (url === '') return '(native)'
  const p = url.startsWith('file://') ? url.slice('file://'.length) : url
  return p.startsWith(root) ? path.relative(root, p) : p.replace(/^.*node_modules\//, 'node_modules/')
}

export function summarizeProfile(file: string, root: string, top = 25): ProfileSummary {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile
  const totalHits = prof.nodes.reduce((n, x) => n + (x.hitCount ?? 0), 0)
  const totalMs = (prof.endTime - prof.startTime) / 1000
  const msPerHit = totalHits > 0 ? totalMs / totalHits : 0
  const byFn = new Map<string, number>()
  const byFile = new Map<string, number>()
  let idle = 0
  for (const n of prof.nodes) {
    const hits = n.hitCount ?? 0
    if (hits === 0) continue
    const f = n.callFrame
    if (f.functionName === '(idle)') { idle += hits; continue }
    const where = shortUrl(f.url, root)
    const fnKey = `${f.functionName === '' ? '(anonymous)' : f.functionName} ${where}${f.url === '' ? '' : `:${f.lineNumber + 1}`}`
    byFn.set(fnKey, (byFn.get(fnKey) ?? 0) + hits)
    byFile.set(where, (byFile.get(where) ?? 0) + hits)
  }
  const busy = totalHits - idle
  const rank = (m: Map<string, number>): Hotspot[] => [...m.entries()]
    .sort((a, b) => b[1] - a[1]).slice(0, top)
    .map(([name, hits]) => ({ name, selfPct: busy > 0 ? (100 * hits) / busy : 0, selfMs: hits * msPerHit }))
  return { file, totalMs, idlePct: totalHits > 0 ? (100 * idle) / totalHits : 0, functions: rank(byFn), files: rank(byFile) }
}

export function formatProfile(s: ProfileSummary): string {
  const lines = [`profile ${s.file}: ${(s.totalMs / 1000).toFixed(1)} s, idle ${s.idlePct.toFixed(1)}% (start-up included; shares below are of busy time)`, '  top functions (self time):']
  for (const h of s.functions) lines.push(`    ${h.selfPct.toFixed(1).padStart(5)}%  ${h.name}`)
  lines.push('  top files (self time):')
  for (const h of s.files.slice(0, 15)) lines.push(`    ${h.selfPct.toFixed(1).padStart(5)}%  ${h.name}`)
  return lines.join('\n')
}
