"""No output that nbval compares may depend on the machine running the tests.

tools/host_scan.py finds compared cells that read the host; these tests run
it over every chapter and show, on planted cells, that it can fail."""
import host_scan  # tools/, put on sys.path by the root conftest.py


def test_no_compared_cell_reads_the_host():
    found = host_scan.problems()
    assert not found, "\n".join(found)


def test_scan_catches_a_cache_size_read_from_sys():
    # the cell that once glued this machine's level-3 cache size
    cell = ('from pathlib import Path\n'
            'for level, index in (("l2", 2), ("l3", 3)):\n'
            '    f_ = Path(f"/sys/devices/system/cpu/cpu0/cache/index{index}'
            '/size")\n'
            '    glue(f"{level}_size", f_.read_text().strip(), display=False)\n')
    assert host_scan.host_reads(cell) == [
        "reads '/sys/devices/system/cpu/cpu0/cache/index/size'"]


def test_scan_catches_calls_that_read_the_machine_or_clock():
    cell = ("import os, platform, time\n"
            "print(os.cpu_count(), platform.processor())\n"
            "print(time.strftime('%Y'))\n"
            "env = environment()\n")
    assert host_scan.host_reads(cell) == [
        "calls environment()", "calls os.cpu_count()",
        "calls platform.processor()", "calls time.strftime()"]


def test_scan_allows_defining_a_reader_and_reading_committed_json():
    cell = ("def env():\n    return os.cpu_count()\n"
            "data = json.loads(Path('../results/x.json').read_text())\n"
            "print(data['environment']['cpu_model'])\n")
    assert host_scan.host_reads(cell) == []
