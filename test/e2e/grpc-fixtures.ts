// A unary gRPC call for the CLI tests: an empty message on a session, and what
// came back (the HTTP status, the head, and grpc-status / grpc-message from the
// head of a trailers-only answer or from the trailers).
import http2 from 'node:http2'

export interface GrpcAnswer {
  readonly status: number
  /** '' when none came. */
  readonly grpcStatus: string
  readonly message: string
  readonly headers: http2.IncomingHttpHeaders
}

export function grpcCall(session: http2.ClientHttp2Session, p: string, extra: http2.OutgoingHttpHeaders = {}, authority = 'grpc.example.test'): Promise<GrpcAnswer> {
  return new Promise((resolve, reject) => {
    const s = session.request({ ':method': 'POST', ':path': p, ':authority': authority, 'content-type': 'application/grpc', te: 'trailers', ...extra })
    let head: http2.IncomingHttpHeaders = {}
    let tail: http2.IncomingHttpHeaders = {}
    const timer = setTimeout(() => { s.close(); reject(new Error(`${p}: no answer`)) }, 10_000)
    s.on('response', (h) => { head = h })
    s.on('trailers', (h) => { tail = h })
    s.on('error', () => {})
    s.resume()
    s.on('close', () => {
      clearTimeout(timer)
      const status = String(head['grpc-status'] ?? tail['grpc-status'] ?? '')
      resolve({ status: Number(head[':status']), grpcStatus: status, message: decodeURIComponent(String(head['grpc-message'] ?? tail['grpc-message'] ?? '')), headers: head })
    })
    s.end(Buffer.from([0, 0, 0, 0, 0]))
  })
}
