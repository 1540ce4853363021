# The folders of real photographs that the image-pipeline tests read, made at
# test time by tools/image_data/make_image_folder.py (Debian's python3-pil,
# python3-sklearn and python3-skimage) in a CTest fixture named image_folder:
#   DDP_IMAGE_TEST_FOLDER      3 classes x 6 images, PATH/train and PATH/val
#   DDP_IMAGE_TEST_FOLDER_BAD  3 classes x 4 images plus 3 bad files in the first
set(DDP_IMAGE_TEST_FOLDER ${PROJECT_BINARY_DIR}/image_test_data/photos)
set(DDP_IMAGE_TEST_FOLDER_BAD ${PROJECT_BINARY_DIR}/image_test_data/photos_bad)
set(_make ${PROJECT_SOURCE_DIR}/tools/image_data/make_image_folder.py)
add_test(NAME data.make_image_folder
         COMMAND /usr/bin/python3 ${_make} ${DDP_IMAGE_TEST_FOLDER}
                 --classes 3 --per-class 6 --val-per-class 2 --split)
add_test(NAME data.make_image_folder_bad
         COMMAND /usr/bin/python3 ${_make} ${DDP_IMAGE_TEST_FOLDER_BAD} --classes 3
                 --per-class 4 --bad --seed 1)
set_tests_properties(data.make_image_folder data.make_image_folder_bad PROPERTIES
                     LABELS unit TIMEOUT 60 FIXTURES_SETUP image_folder)
