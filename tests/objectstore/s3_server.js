// The S3-compatible server the object-storage tests and benchmarks start: s3rver (@20minutes/s3rver, which checks
// SigV4 signatures) on 127.0.0.1, with one bucket and one key pair, the key pair from the environment
// (STOKER_TEST_S3_KEY, STOKER_TEST_S3_SECRET) so it is never on a command line. Its default S3RVER key is revoked.
// Writes the port it bound to PORT_FILE once it serves. Virtual-host requests: BUCKET.s3.localhost:PORT.
// s3rver checks SigV4 against /BUCKET/KEY even for virtual-host requests (real S3 signs /KEY there), so a test of
// virtual-host addressing sets STOKER_TEST_S3_UNCHECKED=1: requests are routed by host, signatures not compared.
//
//   node s3_server.js DIRECTORY PORT_FILE BUCKET [PORT]
'use strict';

const fs = require('fs');
const path = require('path');
const S3rver = require('@20minutes/s3rver');
const AWSAccount = require(path.join(path.dirname(require.resolve('@20minutes/s3rver')), 'models', 'account'));

const [directory, portFile, bucket, port] = process.argv.slice(2);
const key = process.env.STOKER_TEST_S3_KEY;
const secret = process.env.STOKER_TEST_S3_SECRET;
if (!directory || !portFile || !bucket || !key || !secret) {
  console.error('usage: STOKER_TEST_S3_KEY=... STOKER_TEST_S3_SECRET=... node s3_server.js DIR PORT_FILE BUCKET [PORT]');
  process.exit(2);
}
AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER');
AWSAccount.DUMMY_ACCOUNT.createKeyPair(key, secret);

const server = new S3rver({
  address: '127.0.0.1',
  port: Number(port || 0),
  directory,
  silent: true,
  serviceEndpoint: 'localhost',
  allowMismatchedSignatures: process.env.STOKER_TEST_S3_UNCHECKED === '1',
  configureBuckets: [{ name: bucket }],
});
server.run((err, address) => {
  if (err) {
    console.error(`s3_server: ${err.message}`);
    process.exit(1);
  }
  fs.writeFileSync(`${portFile}.tmp`, String(address.port));
  fs.renameSync(`${portFile}.tmp`, portFile);
  console.log(`s3_server: serving ${directory} on 127.0.0.1:${address.port}, bucket ${bucket}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
