#pragma once
// The data layer (ddp::data): datasets, samplers, transforms and the DataLoader.

#include "ddp/data/data_loader.h"
#include "ddp/data/dataset.h"
#include "ddp/data/elastic_sampler.h"
#include "ddp/data/image_folder.h"
#include "ddp/data/image_transform.h"
#include "ddp/data/packed_images.h"
#include "ddp/data/record_file.h"
#include "ddp/data/sampler.h"
#include "ddp/data/text.h"
#include "ddp/data/transforms.h"
#include "ddp/data/vision.h"
