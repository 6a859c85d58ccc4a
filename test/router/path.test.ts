// RFC 3986 path normalization before routing (lib/router/path.ts): what a
// route matches is what the upstream is sent, so `/public/../admin` cannot
// match a `/public` prefix and reach `/admin` upstream.

import t from 'tap'
import { ESCAPED_DOT_SEGMENT, MALFORMED_ESCAPE, normalizePath } from '../../lib/router/path.ts'

t.test('paths with nothing to normalize come back as they are (the same string)', async (t) => {
  for (const p of ['/', '/a/b', '/a/b/', '/v1/chat.completions', '/a.b/c..d/.e', '/a//b', '*', '/%2F', '/a%2Fb%20c']) {
    t.equal(normalizePath(p), p, p)
  }
})

t.test('dot segments are removed as RFC 3986 §5.2.4 removes them', async (t) => {
  const cases: Array<[string, string]> = [
    ['/a/b/../c', '/a/c'],
    ['/a/b/..', '/a/'],
    ['/a/./b', '/a/b'],
    ['/a/.', '/a/'],
    ['/./a', '/a'],
    ['/..', '/'],
    ['/../../a', '/a'],
    ['/public/../admin', '/admin'],
    ['/public//../admin', '/public/admin'],
    ['/a/b/c/./../../g', '/a/g'],
    ['/mid/content=5/../6', '/mid/6'],
    ['/a/..b/c', '/a/..b/c'],
    ['/a/.../c', '/a/.../c'],
  ]
  for (const [input, want] of cases) t.equal(normalizePath(input), want, input)
})

t.test('percent-encoded unreserved characters are decoded first, other escapes upper-cased and kept', async (t) => {
  const cases: Array<[string, string]> = [
    ['/%7Euser/%61', '/~user/a'],
    ['/public/%2e%2e/admin', '/admin'],
    ['/public/%2E./admin', '/admin'],
    ['/public/.%2e/admin', '/admin'],
    ['/a%2fb', '/a%2Fb'],
    ['/group%2Fproject/..', '/'],
    ['/a/b%2F.c/x', '/a/b%2F.c/x'],
    ['/q%3fx', '/q%3Fx'],
    ['/%e2%82%ac', '/%E2%82%AC'],
    ['/a%20b', '/a%20b'],
  ]
  for (const [input, want] of cases) t.equal(normalizePath(input), want, input)
})

t.test('backslashes are path separators, as Envoy normalizes them', async (t) => {
  t.equal(normalizePath('/public\\..\\admin'), '/admin')
  t.equal(normalizePath('/a\\b'), '/a/b')
})

t.test('a malformed percent-encoding is refused', async (t) => {
  for (const p of ['/a%', '/a%2', '/a%zz', '/a%2g/b', '/%%41']) t.equal(normalizePath(p), MALFORMED_ESCAPE, p)
})

t.test('an escaped slash that would make a dot segment if decoded is refused', async (t) => {
  for (const p of ['/public/..%2fadmin', '/public/x/..%2F../admin', '/public/%2e%2e%2Fadmin', '/a%5C..%5Cb', '/a%2F.', '/a/b/..%2F']) {
    t.equal(normalizePath(p), ESCAPED_DOT_SEGMENT, p)
  }
  for (const p of ['/api/v4/projects/group%2Fproject', '/a/b%2F.c', '/a/..b%2Fc', '/files/x%2F..y']) {
    t.type(normalizePath(p), 'string', `${p}: an escaped slash among names is data`)
  }
})
