# A dataset manifest, written by `stoker index` and read by the coordinator (sample count, fingerprint) and by
# workers (where each sample's bytes are). On disk: the 8 bytes "STKMAN01", then one Cap'n Proto message
# (standard unpacked serialization). The manifest's fingerprint is XXH64 of the whole file.
#
# Samples are numbered by their position in `samples`: that number is the sample id used everywhere (plans,
# batches, quarantine reports, the checker). Sample ids are stable as long as the manifest is.
@0x87b5d98374e6a0a1;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("stoker::wire");

enum SourceKind {
  imageFolder @0;               # ROOT/<class>/<file>: labels are the sorted class folder names' positions
  tarShards @1;                 # WebDataset-style .tar shards: KEY.jpg|jpeg|png + KEY.cls
}

enum ImageFormat {
  jpeg @0;
  png @1;
  other @2;                     # anything else OpenCV may decode
}

struct Shard {
  path @0 :Text;                # relative to Manifest.root
  byteSize @1 :UInt64;          # a worker refuses a shard whose size changed since indexing
  checksum @2 :UInt64;          # XXH64 of the shard's bytes (0 when indexed with --no-checksum)
  sampleCount @3 :UInt32;
  etag @4 :Text;                # remote shards (format 2): the object's ETag when indexed; a worker refuses bytes
                                # served under another ETag (the object was replaced). Empty for local files
}

struct Sample {
  shard @0 :UInt32;
  offset @1 :UInt64;            # byte offset of the image inside the shard (0 for an ImageFolder file)
  size @2 :UInt32;              # image bytes
  label @3 :Int64;              # -1 when unknown (then `defect` says why)
  format @4 :ImageFormat;
  key @5 :Text;                 # tar member basename or file path relative to root, for people
  defect @6 :Text;              # non-empty: found unusable while indexing (e.g. "missing_label"); quarantined
  checksum @7 :UInt64;          # XXH64 of the sample's `size` bytes; 0: not recorded (indexed without checksums,
                                # or a format 1 manifest). Workers verify it on every read and quarantine a mismatch
}

struct Manifest {
  formatVersion @0 :UInt32;     # 1, or 2 when the shards are remote (a URL root, ETags): version 1 readers would
                                # take the URL for a path. Readers accept both; fields a version lacks read as 0/""
  root @1 :Text;                # absolute dataset root at indexing time, or the URL shards are relative to
                                # (s3://bucket/prefix/, https://host/path/; format 2)
  source @2 :SourceKind;
  classes @3 :List(Text);
  shards @4 :List(Shard);
  samples @5 :List(Sample);
  createdBy @6 :Text;           # "stoker index <version>"
  createdAtUnixMs @7 :UInt64;
}
