// SigV4 canonical URI and query against AWS's documented rules, with the
// expected strings written out by hand from the AWS General Reference ("Create
// a canonical request") and the normalize-path cases of AWS's SigV4 test suite:
//
// - every service but S3 normalizes the path (RFC 3986 §5.2.4 dot segments,
//   and empty segments go: `//example//` → `/example/`), then encodes each
//   segment twice; S3 neither normalizes nor double-encodes;
// - encoding is of octets: everything but A-Z a-z 0-9 - _ . ~ as %XY, uppercase;
//   a percent-escape stands for its octet, whether or not the octets are UTF-8.
import t from 'tap'
import { canonicalQuery, canonicalUri } from '../../lib/extensions/sigv4.ts'

t.test('non-S3 paths are normalized before they are encoded (AWS test suite normalize-path)', async (t) => {
  const cases: Array<[string, string]> = [
    ['//', '/'], // get-slash
    ['//example//', '/example/'], // get-slashes
    ['/example/..', '/'], // get-relative
    ['/example1/example2/../..', '/'], // get-relative-relative
    ['/./', '/'], // get-slash-dot-slash
    ['/./example', '/example'], // get-slash-pointless-dot
    ['/a/b/../c/./d', '/a/c/d'],
    ['/..', '/'],
    ['/a/', '/a/'],
    ['/model/m:1/invoke', '/model/m%253A1/invoke'],
  ]
  for (const [path, want] of cases) t.equal(canonicalUri(path, 'service'), want, path)
})

t.test('S3 paths are neither normalized nor double-encoded', async (t) => {
  t.equal(canonicalUri('//bucket//a/./b/../c', 's3'), '//bucket//a/./b/../c')
  t.equal(canonicalUri('/bucket/a b+c', 's3'), '/bucket/a%20b%2Bc')
  t.equal(canonicalUri('/bucket/a%2Fb', 's3'), '/bucket/a%2Fb', 'an encoded slash stays in its segment')
})

t.test('a percent-escape is an octet: not UTF-8 and stray % are encoded as the octets they are', async (t) => {
  // %FF is one octet that is not UTF-8: S3 signs %FF, the others %25FF (encoded again).
  t.equal(canonicalUri('/k%FF', 's3'), '/k%FF')
  t.equal(canonicalUri('/k%FF', 'service'), '/k%25FF')
  t.equal(canonicalUri('/%E2%82%AC%ff', 's3'), '/%E2%82%AC%FF', 'one bad octet does not spoil the rest of the segment')
  t.equal(canonicalUri('/100%', 's3'), '/100%25', 'a % that escapes nothing is the octet %')
  t.equal(canonicalUri('/%7E%41', 's3'), '/~A', 'escaped unreserved characters are the characters')
  t.equal(canonicalQuery('k=%FF&j=%E2%82%AC%ff&l=50%'), 'j=%E2%82%AC%FF&k=%FF&l=50%25')
})

t.test('query: sorted by encoded name then value, empty values, form spaces', async (t) => {
  t.equal(canonicalQuery('b&a=&c=x+y&d=%7E&e=*'), 'a=&b=&c=x%20y&d=~&e=%2A')
  t.equal(canonicalQuery('Param1=value2&Param1=Value1&param0=x'), 'Param1=Value1&Param1=value2&param0=x', 'byte order: uppercase first')
})
