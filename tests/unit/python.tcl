# The Python binding (python/, built into build/python by make): its pytest
# suite, tests/python, run against servers the fixtures start on free ports.
# Each pytest test is reported here as a test of its own. Debian's python3
# with python3-pytest, python3-numpy and python3-torch (make deps-test); a
# missing one is a skip that says so.
#
# The sanitizer build links the extension with ASan/UBSan while python3 is
# not: python_sanitizer_env preloads their runtimes.

set ::py_report [file join $::env(TMPDIR) pytest-report.txt]
set ::py_out {}
set ::py_rc 0
set ::py_skip ""

proc python_binding_skip_reason {} {
    set root [file normalize [file join $::harness(testsdir) ..]]
    if {[glob -nocomplain [file join $root build python mooncake _mooncake*.so]] eq ""} {
        return "build/python has no extension: python3-dev is not installed (make deps)"
    }
    foreach mod {pytest numpy} {
        if {[catch {exec /usr/bin/python3 -c "import $mod" 2>@1} err]} {
            return "python3 cannot import $mod (make deps-test installs python3-$mod): $err"
        }
    }
    return ""
}

tags {python mooncake} {
    if {[__tags_skip_reason__ {python mooncake}] eq ""} {
        set ::py_skip [python_binding_skip_reason]
        if {$::py_skip eq ""} {
            set root [file normalize [file join $::harness(testsdir) ..]]
            file delete $::py_report
            set env_cmd [list env PYTHONPATH=[file join $root build python] \
                MOONCAKE_SERVER=[file join $root src mooncake-server] \
                MOONCAKE_PYTEST_REPORT=$::py_report PYTHONDONTWRITEBYTECODE=1]
            lappend env_cmd {*}[python_sanitizer_env]
            set base [file join $::env(TMPDIR) pytest-base]
            set ::py_rc [catch {
                exec {*}$env_cmd /usr/bin/python3 -m pytest -q -p no:cacheprovider \
                    -o addopts= --rootdir [file join $root tests python] --basetemp $base \
                    [file join $root tests python] 2>@1
            } ::py_out]
            file delete -force $base
        }
    }

    if {$::py_skip ne ""} {
        test {Python binding} { skip $::py_skip }
    } else {
        set lines {}
        if {[file exists $::py_report]} {
            set fh [open $::py_report]
            set lines [split [read $fh] "\n"]
            close $fh
            file delete $::py_report
        }

        test {pytest ran the binding's suite} {
            set n [llength [lsearch -all -regexp $lines {^\[(ok|err|skip)\] }]]
            # test_store, test_mooncake_api, test_kv_offload: fewer means
            # collection lost a file (an import error is reported below).
            if {$n < 60} { fail "only $n tests reported; pytest output:\n[string range $::py_out end-3000 end]" }
        }

        set times {}
        foreach line $lines {
            if {[regexp {^@@seconds (\S+) ([0-9.]+)$} $line -> module secs]} {
                lappend times [list $module $secs]
            }
        }
        if {[llength $times]} {
            puts "    slowest pytest files:"
            foreach e [lrange [lsort -real -decreasing -index 1 $times] 0 7] {
                puts [format "      %7.1f s  %s" [lindex $e 1] [lindex $e 0]]
            }
        }

        foreach line $lines {
            if {![regexp {^\[(ok|err|skip)\] (\S+)(?:: (.*))?$} $line -> status what why]} continue
            if {$status eq "skip"} {
                test "python: $what" { skip $why }
                continue
            }
            set ::py_status $status
            set ::py_why $why
            test "python: $what" {
                assert_equal ok $::py_status $::py_why
            }
        }

        test {pytest exits 0 exactly when no test failed} {
            set failed [expr {[lsearch -regexp $lines {^\[err\]}] >= 0}]
            assert_equal $failed $::py_rc "pytest output:\n[string range $::py_out end-3000 end]"
        }
    }
}
