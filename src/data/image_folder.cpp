// Image datasets with in-decoder transforms (image_folder.h). See Note
// [ImageFolder semantics].

#include "ddp/data/image_folder.h"

#include <algorithm>
#include <filesystem>

#include "data/data_util.h"
#include "ddp/core/logging.h"

namespace ddp::data {

namespace fs = std::filesystem;

// ---- EncodedImageDataset -----------------------------------------------------

EncodedImageDataset::EncodedImageDataset(ImageTransform transform, BadImagePolicy policy,
                                         std::vector<std::string> classes)
    : Dataset(ExampleSpec{}), transform_(transform), policy_(policy), classes_(std::move(classes)) {
  transform_.validate();
  ExampleSpec spec;
  spec.input_shape = transform_.output_shape();
  spec.input_dtype = transform_.dtype;
  set_spec(spec);
}

std::vector<std::string> EncodedImageDataset::bad_images() const {
  std::lock_guard<std::mutex> g(bad_mu_);
  return bad_;
}

int64_t EncodedImageDataset::bad_count() const {
  std::lock_guard<std::mutex> g(bad_mu_);
  return int64_t(bad_.size());
}

void EncodedImageDataset::note_bad(const std::string& what) const {
  std::lock_guard<std::mutex> g(bad_mu_);
  if (std::find(bad_.begin(), bad_.end(), what) != bad_.end()) return;
  bad_.push_back(what);
  DDP_LOG_WARNING("{}: skipping a bad image: {}", describe(), what);
}

void EncodedImageDataset::do_read(int64_t index, void* input, void* target) const {
  // get() and collate() outside a loader: the stream of seed 0, epoch 0.
  SampleRng rng(0, 0, index);
  do_read_random(index, input, target, rng);
}

void EncodedImageDataset::do_read_random(int64_t index, void* input, void* target,
                                         SampleRng& rng) const {
  thread_local std::vector<uint8_t> buffer;
  const int64_t n = size();
  // With BadImagePolicy::skip a bad example is replaced by the next good one
  // (wrapping around), so a batch keeps its size and the choice is the same
  // for any number of workers.
  for (int64_t tries = 0; tries < n; ++tries) {
    const int64_t i = (index + tries) % n;
    try {
      decode_transformed(encoded(i, buffer), example_name(i), transform_, rng, input);
      if (target) *static_cast<int64_t*>(target) = label(i);
      return;
    } catch (const IoError& e) {
      if (policy_ == BadImagePolicy::raise) throw;
      note_bad(e.what());
    }
  }
  DDP_THROW(IoError, "{}: none of its {} images can be decoded", describe(), n);
}

// ---- ImageFolderDataset ---------------------------------------------------------

namespace {

bool has_extension(const std::string& name, const std::vector<std::string>& exts) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  for (const std::string& e : exts)
    if (lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0)
      return true;
  return false;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// The files under `dir` in the order of Python's sorted(os.walk(dir,
// followlinks=True)) with each folder's names sorted: folders by their full
// path, files by name within a folder.
std::vector<std::string> walk_sorted(const fs::path& dir) {
  std::vector<std::pair<std::string, std::vector<std::string>>> folders;
  std::vector<fs::path> todo{dir};
  while (!todo.empty()) {
    const fs::path d = todo.back();
    todo.pop_back();
    std::vector<std::string> files;
    std::error_code ec;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code ec2;
      if (it->is_directory(ec2))
        todo.push_back(it->path());
      else
        files.push_back(it->path().filename().string());
    }
    std::sort(files.begin(), files.end());
    folders.emplace_back(d.string(), std::move(files));
  }
  std::sort(folders.begin(), folders.end());
  std::vector<std::string> out;
  for (auto& [folder, files] : folders)
    for (const std::string& f : files) out.push_back((fs::path(folder) / f).string());
  return out;
}

}  // namespace

std::vector<std::string> find_image_classes(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) DDP_THROW(IoError, "image folder '{}' is not a directory", root);
  std::vector<std::string> classes;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_directory(ec2)) classes.push_back(it->path().filename().string());
  }
  if (ec) DDP_THROW(IoError, "cannot list image folder '{}': {}", root, ec.message());
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) DDP_THROW(IoError, "Couldn't find any class folder in {}.", root);
  return classes;
}

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageTransform transform,
                                       ImageFolderOptions options)
    : EncodedImageDataset(transform, options.bad_images, find_image_classes(root)), root_(root) {
  DDP_CHECK(options.holdout_every >= 0, "ImageFolderDataset('{}'): holdout_every {} < 0", root,
            options.holdout_every);
  DDP_CHECK(options.part == ImageFolderOptions::Part::all || options.holdout_every > 0,
            "ImageFolderDataset('{}'): a held-out part needs holdout_every > 0", root);
  std::vector<std::string> empty;
  for (size_t c = 0; c < classes().size(); ++c) {
    int64_t position = 0;
    for (std::string& path : walk_sorted(fs::path(root) / classes()[c])) {
      if (!has_extension(path, options.extensions)) continue;
      const bool held = options.holdout_every > 0 &&
                        position % options.holdout_every == options.holdout_every - 1;
      ++position;
      if (options.part == ImageFolderOptions::Part::rest && held) continue;
      if (options.part == ImageFolderOptions::Part::held_out && !held) continue;
      samples_.push_back({std::move(path), int64_t(c)});
    }
    if (position == 0) empty.push_back(classes()[c]);
  }
  if (!empty.empty())
    DDP_THROW(IoError, "Found no valid file for the classes {}. Supported extensions are: {}",
              join(empty, ", "), join(options.extensions, ", "));
}

std::string ImageFolderDataset::describe() const {
  return fmt::format("ImageFolderDataset({}, {} images, {} classes)", root_, samples_.size(),
                     classes().size());
}

std::span<const uint8_t> ImageFolderDataset::encoded(int64_t index,
                                                     std::vector<uint8_t>& buffer) const {
  buffer = detail::read_file(samples_[size_t(index)].path);
  return {buffer.data(), buffer.size()};
}

}  // namespace ddp::data
