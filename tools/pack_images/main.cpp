// pack_images: an ImageFolder into packed, memory-mapped shards (Note
// [Packed image format]; docs/data.md).
//
//   pack_images --shards 64 --max-side 500 --quality 90 /data/imagenet/train /data/packed/train
//
// Exit status 0 when packed, 1 for an error (a bad image names its path;
// --skip-bad leaves bad images out and counts them), 2 for a bad command line.

#include <fmt/format.h>

#include <cstdio>
#include <thread>

#include "command_line.h"
#include "ddp/core/error.h"
#include "ddp/data/packed_images.h"

int main(int argc, char** argv) {
  ddp::data::PackOptions o;
  o.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  int64_t threads = o.threads;
  bool skip_bad = false;
  std::string input, output;
  ddp_cli::CommandLine cli("pack_images",
                           "Packs an ImageFolder (class sub-folders of JPEG/PNG images) into\n"
                           "memory-mapped shards of re-encoded JPEGs for PackedImageDataset.\n"
                           "usage: pack_images [options] INPUT OUTPUT (options first)");
  cli.add_int("--shards", &o.shards, "number of shard files", 1);
  cli.add_int("--max-side", &o.max_side, "longer side of the re-encoded images", 1);
  cli.add_int("--quality", &o.quality, "JPEG quality (1-100)", 1);
  int64_t seed = 0;
  cli.add_int("--seed", &seed, "seed of the record shuffle", 0);
  cli.add_int("--threads", &threads, "decoding threads", 1);
  cli.add_flag("--skip-bad", &skip_bad, "leave out (and count) images that cannot be decoded");
  cli.stop_at_command();
  try {
    cli.parse(argc, argv);
    if (cli.command().size() != 2) cli.fail("expected INPUT and OUTPUT folders");
    if (o.quality > 100) cli.fail(fmt::format("--quality: {} is not in 1..100", o.quality));
  } catch (const ddp_cli::UsageExit& e) {
    std::fputs(e.what(), e.code == 0 ? stdout : stderr);
    return e.code;
  }
  input = cli.command()[0];
  output = cli.command()[1];
  o.seed = uint64_t(seed);
  o.threads = int(threads);
  o.bad_images = skip_bad ? ddp::data::BadImagePolicy::skip : ddp::data::BadImagePolicy::raise;
  try {
    const ddp::data::PackReport r = ddp::data::pack_image_folder(input, output, o);
    fmt::print("pack_images: {} images ({:.1f} MB) into {} shards ({:.1f} MB) in {}; {} skipped\n",
               r.images, double(r.bytes_in) / 1e6, r.shard_paths.size(),
               double(r.bytes_out) / 1e6, output, r.skipped);
    for (const std::string& s : r.skipped_images) fmt::print("  skipped: {}\n", s);
    return 0;
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "pack_images: %s\n", e.what());
    return 1;
  }
}
