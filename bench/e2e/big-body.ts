// The 1 GiB transfer client: one download and one upload of `bytes` bytes
// through a given port, timed, bounded by a deadline (the request is destroyed
// when it passes). The body is generated from one reused chunk and counted,
// never kept, so the client's memory is flat too.

import http from 'node:http'

const CHUNK = Buffer.alloc(256 * 1024, 0x75)

export interface TransferResult {
  readonly direction: 'download' | 'upload'
  readonly ok: boolean
  readonly status: number
  readonly bytes: number
  readonly seconds: number
  readonly MiBps: number
  readonly error: string | null
}

function result(direction: TransferResult['direction'], status: number, bytes: number, started: bigint, error: string | null, expected: number): TransferResult {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  return {
    direction, status, bytes, seconds, error,
    ok: error === null && status === 200 && bytes === expected,
    MiBps: seconds > 0 ? bytes / 1024 / 1024 / seconds : 0,
  }
}

export async function download(port: number, bytes: number, deadlineMs: number): Promise<TransferResult> {
  const started = process.hrtime.bigint()
  return await new Promise((resolve) => {
    let got = 0
    let status = 0
    let settled = false
    const done = (error: string | null): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resolve(result('download', status, got, started, error, bytes))
    }
    const req = http.get({ host: '127.0.0.1', port, path: `/big/download?bytes=${bytes}`, agent: false }, (res) => {
      status = res.statusCode ?? 0
      res.on('data', (c: Buffer) => { got += c.length })
      res.on('end', () => done(null))
      res.on('error', (err) => done(err.message))
    })
    req.on('error', (err) => done(err.message))
    const timer = setTimeout(() => { req.destroy(); done(`deadline ${deadlineMs} ms passed`) }, deadlineMs)
  })
}

export async function upload(port: number, bytes: number, deadlineMs: number): Promise<TransferResult> {
  const started = process.hrtime.bigint()
  return await new Promise((resolve) => {
    let status = 0
    let answer = ''
    let settled = false
    const done = (error: string | null): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      let counted = 0
      try { counted = (JSON.parse(answer) as { bytes: number }).bytes } catch { counted = 0 }
      resolve(result('upload', status, counted, started, error, bytes))
    }
    const req = http.request({
      host: '127.0.0.1', port, method: 'POST', path: '/big/upload', agent: false,
      headers: { 'content-type': 'application/octet-stream', 'content-length': String(bytes) },
    }, (res) => {
      status = res.statusCode ?? 0
      res.setEncoding('utf8')
      res.on('data', (c: string) => { answer += c })
      res.on('end', () => done(null))
      res.on('error', (err) => done(err.message))
    })
    req.on('error', (err) => done(err.message))
    const timer = setTimeout(() => { req.destroy(); done(`deadline ${deadlineMs} ms passed`) }, deadlineMs)
    let left = bytes
    const pump = (): void => {
      while (left > 0) {
        if (settled) return
        const n = Math.min(left, CHUNK.length)
        left -= n
        const more = req.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))
        if (!more) { req.once('drain', pump); return }
      }
      req.end()
    }
    pump()
  })
}
