/* A preload for the sanitizer runs of the tool suites (scripts/vkh2o.sh test-sanitize): dlclose
 * does nothing, so every library a process opens stays mapped until it exits. The Vulkan loader
 * unloads the driver when the last instance is destroyed; an allocation the driver keeps for the
 * process (lavapipe makes one on some CPUs) is then reported by LeakSanitizer from an
 * "<unknown module>" that tests/lsan.supp cannot name. With the module still mapped its globals
 * are scanned and its frames named, and the suppressions apply. Built without the sanitizer and
 * with no dependencies, so it can ride on every process of a test script (bash, python) at no
 * cost; vkh2o's own leaks are still reported. */
int dlclose(void* handle);

int dlclose(void* handle)
{
    (void)handle;
    return 0;
}
