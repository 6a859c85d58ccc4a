// An HTTP answer read within a bound: a timeout alone let a peer that answers fast
// and without end fill the heap (an ExternalProcessor: 1.3 GiB in five seconds; a
// CRL distribution point: 512 MiB before the fetch's 5 s timeout). A declared length
// over the bound fails at once; a streamed one when it passes the bound, and the
// rest is not read (the connection is cancelled). Used by the extension callouts
// (ExternalProcessor, OAuth2 token endpoints) and the CRL fetcher.

/** The answer's bytes, or an Error naming `who` when it has more than `limit` bytes. */
export async function readBoundedBytes(res: Response, limit: number, who: string): Promise<Buffer> {
  const body = res.body
  if (body === null) return Buffer.alloc(0)
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
  return Buffer.concat(chunks, size)
}

/** The answer as UTF-8 text, or an Error naming `who` when it has more than `limit` bytes. */
export async function readBounded(res: Response, limit: number, who: string): Promise<string> {
  return (await readBoundedBytes(res, limit, who)).toString('utf8')
}
