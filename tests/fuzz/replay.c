/* Replays fuzz inputs (files or directories of files) through a fuzz target
 * without libFuzzer, so every build re-runs the regression corpus. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
    size_t got = data != NULL ? fread(data, 1, (size_t)size, file) : 0;
    fclose(file);
    if (data == NULL || got != (size_t)size) {
        free(data);
        return 1;
    }
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
    return 0;
}

int main(int argc, char **argv)
{
    int inputs = 0, failures = 0;
    for (int i = 1; i < argc; i++) {
        struct stat info;
        if (stat(argv[i], &info) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(info.st_mode)) {
            failures += run_file(argv[i]);
            inputs++;
            continue;
        }
        DIR *dir = opendir(argv[i]);
        for (struct dirent *e = dir ? readdir(dir) : NULL; e != NULL; e = readdir(dir)) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            failures += run_file(path);
            inputs++;
        }
        if (dir)
            closedir(dir);
    }
    printf("replay: %d inputs, %d unreadable\n", inputs, failures);
    return failures != 0 || inputs == 0;
}
