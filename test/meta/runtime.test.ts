import t from 'tap'
import { SallyportError, ErrorCode, statusOf } from '../../lib/errors.ts'

t.test('tests run on the pinned Node 24', async (t) => {
  t.equal(process.versions.node.split('.')[0], '24')
})

t.test('error codes map to one status each', async (t) => {
  const e = new SallyportError(ErrorCode.NO_ROUTE, 'no route for host')
  t.equal(e.status, 404)
  t.equal(e.code, 'SP_ERR_NO_ROUTE')
  t.equal(statusOf(ErrorCode.UPSTREAM_TIMEOUT), 504)
})
