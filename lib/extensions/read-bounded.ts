// A callout's answer (ExternalProcessor, an OAuth2 token endpoint) read within
// a bound: `timeoutMs` alone let a callout that answers fast and without end
// fill the heap (1.3 GiB in five seconds). A declared length over the bound
// fails at once; a streamed one when it passes the bound, and the rest is not
// read (the connection is cancelled).

/** The answer as UTF-8 text, or an Error naming `who` when it has more than `limit` bytes. */
export async function readBounded(res: Response, limit: number, who: string): Promise<string> {
  const body = res.body
  if (body === null) return ''
  const declared = res.headers.get('content-length')
  if (declared !== null && Number(declared) > limit) {
    void body.cancel().catch(() => {})
    throw new Error(`${who} answered more than ${limit} bytes`)
  }
  const reader = body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > limit) {
      void reader.cancel().catch(() => {})
      throw new Error(`${who} answered more than ${limit} bytes`)
    }
    chunks.push(value)
  }
  return Buffer.concat(chunks, size).toString('utf8')
}
