# The append-only log (aof.c, aofformat.c, mooncake-check-aof): what was
# acknowledged is there after a restart or a kill -9, with every fsync
# policy; a cut tail is cut, damage refuses to start; the rewrite keeps the
# log bounded while writes go on; objects whose replicas live only in client
# segments are never resurrected stale.

set ::check_aof [file join $::harness(root) src mooncake-check-aof]

# mooncake-check-aof's exit status and output.
proc check_aof {args} {
    set rc [catch {exec $::check_aof {*}$args} out opts]
    set status 0
    if {$rc} {
        set code [dict get $opts -errorcode]
        if {[lindex $code 0] ne "CHILDSTATUS"} { error $out }
        set status [lindex $code 2]
    }
    return [list $status $out]
}

proc aof_dir {} { file join [srv 0 dir] appendonlydir }
proc aof_files {} { lsort [glob -nocomplain -tails -directory [aof_dir] *] }
proc aof_manifest {} {
    set f [open [file join [aof_dir] appendonly.aof.manifest]]
    set text [read $f]
    close $f
    return $text
}
proc aof_field {f} { get_info_field r persistence $f }
# A start that must be refused: 1 if the server exited, and its log (the
# config sends it to the block's log file).
proc aof_start_refused {} {
    lassign [run_server_expecting_exit [srv 0 config_file]] exited out
    return [list $exited [exec cat [srv 0 stdout]]]
}
# The files the manifest lists, in order, that hold data (not history).
proc aof_listed {{type {}}} {
    set out {}
    foreach line [split [aof_manifest] "\n"] {
        if {[llength $line] == 6 && ($type eq "" || [lindex $line 5] eq $type)} { lappend out [lindex $line 1] }
    }
    return $out
}
proc wait_rewrite_done {n} {
    wait_for_condition 200 50 {
        [aof_field aof_rewrite_in_progress] == 0 && [aof_field aof_rewrites] >= $n
    } else { fail "rewrite $n did not finish: [r info persistence]" }
}
# A pending put's bytes through the data plane, then PUT.END.
proc aof_put {key bytes args} {
    lassign [lindex [r put.start $key [string length $bytes] {*}$args] 0] seg off
    assert_equal OK [r seg.write $seg $off $bytes]
    assert_equal OK [r put.end $key]
}

tags {aof} {

start_server {overrides {appendonly yes appendfsync always segment-size 16mb}} {
    test {Strings of every size, expiry, counters, store objects and pins survive a restart} {
        r set small v1
        set big [pattern_bytes 1048576 7]
        r set big $big
        r set ttl:long v EX 1000
        r set ttl:gone v PX 50
        r incr counter
        r incrby counter 41
        r set app abc
        r append app def
        r setrange app 1 XY
        r set deleted x
        r del deleted
        r set persisted v EX 1000
        r persist persisted
        aof_put obj:1 [pattern_bytes 5000 3]
        aof_put obj:pinned [pattern_bytes 100 4]
        r pin obj:pinned HARD
        set before_obj [r get obj:1]
        after 60 ;# ttl:gone is past its expiry when the server comes back
        restart_server 0 kill
        assert_equal v1 [r get small]
        assert_equal $big [r get big]
        assert_range [r ttl ttl:long] 990 1000
        assert_equal 0 [r exists ttl:gone]
        assert_equal 42 [r get counter]
        assert_equal aXYdef [r get app]
        assert_equal 0 [r exists deleted]
        assert_equal -1 [r ttl persisted]
        assert_equal $before_obj [r get obj:1]
        assert_equal hard [dict get [r object.info obj:pinned] pin]
        assert_match "*DB loaded from append only file:*keys restored*" [exec cat [srv 0 stdout]]
    }

    test {FLUSHALL and what follows it: only what came after the flush returns} {
        r set before 1
        r flushall
        r set after 2
        restart_server 0 kill
        assert_equal {after} [r keys *]
    }

    test {INFO persistence: Redis's aof_* fields} {
        assert_equal 1 [aof_field aof_enabled]
        assert_equal ok [aof_field aof_last_write_status]
        assert_equal ok [aof_field aof_last_bgrewrite_status]
        assert_morethan [aof_field aof_current_size] 0
        assert_equal 0 [aof_field aof_rewrite_in_progress]
    }
}

foreach policy {always everysec no} {
    start_server [list overrides [list appendonly yes appendfsync $policy]] {
        test "kill -9 under pipelined writes, appendfsync $policy: every acknowledged write is there" {
            set rd [redis_deferring_client]
            set n 3000
            for {set i 0} {$i < $n} {incr i} {
                $rd set key:$i val:$i
                if {$i % 3 == 0} { $rd incr counter }
            }
            # Only what was acknowledged counts: read every reply first.
            set acked 0
            set incrs 0
            for {set i 0} {$i < $n} {incr i} {
                assert_equal OK [$rd read]
                incr acked
                if {$i % 3 == 0} { set incrs [$rd read] }
            }
            $rd close
            restart_server 0 kill
            assert_equal [expr {$acked + 1}] [r dbsize]
            assert_equal $incrs [r get counter]
            for {set i 0} {$i < $n} {incr i 97} { assert_equal val:$i [r get key:$i] }
            assert_equal val:[expr {$n - 1}] [r get key:[expr {$n - 1}]]
        }
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {A tail a crash cut is cut off at load, with a log line, and the rest is loaded} {
        for {set i 0} {$i < 20} {incr i} { r set t:$i [string repeat x 100] }
        set incr [lindex [aof_listed i] end]
        set path [file join [aof_dir] $incr]
        set size [file size $path]
        kill_server
        # Cut the last record in half.
        set f [open $path r+]
        chan truncate $f [expr {$size - 60}]
        close $f
        restart_server
        assert_equal 19 [r dbsize]
        assert_equal 0 [r exists t:19]
        assert_match "*short read while loading the AOF file $incr*cutting the last*" [exec cat [srv 0 stdout]]
        assert_equal 0 [lindex [check_aof [file join [aof_dir] appendonly.aof.manifest]] 0]
    }

    test {aof-load-truncated no: a cut tail refuses to start, saying where} {
        r config set aof-load-truncated no
        r config rewrite
        r set last [string repeat y 100]
        set incr [lindex [aof_listed i] end]
        set path [file join [aof_dir] $incr]
        kill_server
        set f [open $path r+]
        chan truncate $f [expr {[file size $path] - 10}]
        close $f
        lassign [aof_start_refused] exited out
        assert_equal 1 $exited
        assert_match "*$incr ends inside a record at offset*aof-load-truncated is no*mooncake-check-aof*" $out
        # The checker cuts it, and the server starts.
        lassign [check_aof --fix [file join [aof_dir] appendonly.aof.manifest]] rc fixed
        assert_equal 0 $rc
        assert_match "*cut * bytes at offset*The AOF is valid*" $fixed
        restart_server
        assert_equal 0 [r exists last]
        assert_equal 19 [r dbsize]
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {A MULTI cut by a crash in the log comes back as none of it, never half} {
        r set before 1
        # A large value goes to the file in writes of its own, so a kill -9
        # can cut the transaction's records anywhere after it.
        r multi
        r set big [string repeat a 300000]
        r set small [string repeat s 40]
        r exec
        set incr [lindex [aof_listed i] end]
        set path [file join [aof_dir] $incr]
        kill_server
        set size [file size $path]
        # Cut inside small's record (or the group's end): big's is whole.
        set f [open $path r+]
        chan truncate $f [expr {$size - 60}]
        close $f
        lassign [check_aof [file join [aof_dir] appendonly.aof.manifest]] rc checked
        assert_equal 1 $rc
        assert_match "*$incr: truncated at offset*" $checked
        restart_server
        assert_equal 1 [r get before]
        assert_equal {0 0} [list [r exists big] [r exists small]]
        assert_match "*cutting the last*" [exec cat [srv 0 stdout]]
        # A whole group loads whole.
        r multi
        r set big [string repeat b 300000]
        r set small t
        r exec
        restart_server 0 kill
        assert_equal {300000 t} [list [r strlen big] [r get small]]
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {Damage in the middle of the log refuses to start, naming file and offset; nothing is skipped} {
        r set a [string repeat a 200]
        r set b [string repeat b 200]
        r set c [string repeat c 200]
        set incr [lindex [aof_listed i] end]
        set path [file join [aof_dir] $incr]
        kill_server
        # A flipped byte inside b's value: its RESTORE payload fails the CRC64.
        set f [open $path r+]
        fconfigure $f -translation binary
        set data [read $f]
        set at [expr {[string first [string repeat b 200] $data] + 100}]
        seek $f $at
        puts -nonewline $f Z
        close $f
        lassign [aof_start_refused] exited out
        assert_equal 1 $exited
        assert_match "*AOF $incr is corrupt at offset *RESTORE payload fails its checksum*Refusing to start*" $out
        lassign [check_aof [file join [aof_dir] appendonly.aof.manifest]] rc checked
        assert_equal 1 $rc
        assert_match "*$incr: corrupt at offset *after 1 valid records*The AOF is damaged*" $checked
        # A record that is no record (a wrong command) is refused too.
        set f [open $path w]
        fconfigure $f -translation binary
        puts -nonewline $f "*2\r\n\$4\r\nINCR\r\n\$1\r\nx\r\n"
        close $f
        lassign [aof_start_refused] exited out
        assert_equal 1 $exited
        assert_match "*corrupt at offset 0: not a record*" $out
        # Start again empty for the block's end.
        file delete -force [aof_dir]
        restart_server
        assert_equal 0 [r dbsize]
    }

    test {A manifest naming a file outside its directory is refused} {
        kill_server
        set f [open [file join [aof_dir] appendonly.aof.manifest] w]
        puts $f "file ../../etc/passwd seq 1 type i"
        close $f
        lassign [aof_start_refused] exited out
        assert_equal 1 $exited
        assert_match "*manifest appendonly.aof.manifest is corrupt*line 1*" $out
        file delete -force [aof_dir]
        restart_server
    }
}

# The bytes of file (binary), and the file written back with one byte XORed.
proc aof_read {path} {
    set f [open $path r]
    fconfigure $f -translation binary
    set data [read $f]
    close $f
    return $data
}
proc aof_write {path data} {
    set f [open $path w]
    fconfigure $f -translation binary
    puts -nonewline $f $data
    close $f
}
proc aof_flip {path at mask} {
    set data [aof_read $path]
    binary scan [string index $data $at] cu b
    aof_write $path [string replace $data $at $at [binary format c [expr {$b ^ $mask}]]]
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {Format 2: a flipped bit in a key, an expiry or a length refuses to start; format 1 loaded them as others} {
        r set alpha [string repeat a 50]
        r set beta [string repeat b 50] pxat 4102444800000
        r set gamma [string repeat c 50]
        set incr [lindex [aof_listed i] end]
        set path [file join [aof_dir] $incr]
        kill_server
        set clean [aof_read $path]
        assert_equal 0 [string first "*2\r\n\$10\r\nAOF.FORMAT\r\n\$1\r\n2\r\n" $clean]
        set manifest [file join [aof_dir] appendonly.aof.manifest]
        # A bit of alpha's key, of beta's expiry (in 2100, it would stay in
        # the future), of gamma's key length: each is refused, never loaded
        # as another key or expiry, and the checker says so.
        foreach {what at} [list key [string first alpha $clean] expiry [expr {[string first 4102444800000 $clean] + 12}] \
                               length [expr {[string first gamma $clean] - 3}]] {
            aof_flip $path $at 1
            lassign [aof_start_refused] exited out
            assert_equal 1 $exited
            assert_match "*AOF $incr is corrupt at offset *fails its check*Refusing to start*" $out
            lassign [check_aof $manifest] rc checked
            assert_equal 1 $rc
            assert_match "*$incr: corrupt at offset*" $checked
            aof_write $path $clean
        }
        restart_server
        assert_equal [string repeat a 50] [r get alpha]
        assert_equal 4102444800000 [r pexpiretime beta]
        assert_equal 3 [r dbsize]
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {Loading: expiries passed while down, a key set twice, a key over today's max-key-size, zeros} {
        set at [expr {[clock milliseconds] + 300}]
        r set gone v pxat $at
        r set dup 1
        r set dup 2
        # A key accepted when the limit was larger: acknowledged, so it loads.
        r config set max-key-size 8192
        set long [string repeat L 5000]
        r set $long v
        r config set max-key-size 4096
        r config rewrite
        set incr [lindex [aof_listed i] end]
        kill_server
        wait_for_condition 100 10 {[clock milliseconds] > $at + 50} else { fail "the clock stands still" }
        restart_server
        assert_equal 0 [r exists gone]
        assert_equal 2 [r dbsize]
        assert_equal 2 [r get dup]
        assert_equal v [r get $long]
        assert_equal 4096 [lindex [r config get max-key-size] 1]
        assert_match "*DB loaded from append only file:*, 1 expired while down;*" [exec cat [srv 0 stdout]]
        # A file of zeros (a disk that lost the blocks) is damage at offset 0.
        set path [file join [aof_dir] $incr]
        kill_server
        aof_write $path [string repeat "\0" 4096]
        lassign [aof_start_refused] exited out
        assert_equal 1 $exited
        assert_match "*AOF $incr is corrupt at offset 0:*Refusing to start*" $out
        file delete -force [aof_dir]
        restart_server
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {A log of format 1 (an older build's) still loads, and is rewritten in format 2} {
        r set k [string repeat v 40]
        set payload [r dump k]
        set incr [lindex [aof_listed i] end]
        kill_server
        # The records as the build before format 2 wrote them: no header, no checks.
        set rec "*6\r\n\$7\r\nRESTORE\r\n\$2\r\nk1\r\n\$1\r\n0\r\n\$[string length $payload]\r\n$payload\r\n"
        append rec "\$6\r\nABSTTL\r\n\$7\r\nREPLACE\r\n*2\r\n\$3\r\nDEL\r\n\$1\r\nk\r\n"
        aof_write [file join [aof_dir] $incr] $rec
        restart_server
        assert_equal [string repeat v 40] [r get k1]
        assert_equal 0 [r exists k]
        assert_match "*1 files of format 1*rewriting the log in format 2*" [exec cat [srv 0 stdout]]
        wait_rewrite_done 1
        set base [lindex [aof_listed b] 0]
        assert_equal 0 [string first "*2\r\n\$10\r\nAOF.FORMAT" [aof_read [file join [aof_dir] $base]]]
        lassign [check_aof [file join [aof_dir] appendonly.aof.manifest]] rc checked
        assert_equal 0 $rc
        assert_match "*$base: format 2, 1 records*" $checked
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {A file the manifest lists that is missing refuses to start, even the last increment} {
        r set a 1
        r set b 2
        set incr [lindex [aof_listed i] end]
        kill_server
        file delete [file join [aof_dir] $incr]
        # Loading without it would drop a and b without a word.
        lassign [aof_start_refused] exited out
        assert_equal 1 $exited
        assert_match "*AOF $incr is listed in the manifest but does not exist*Refusing to start*" $out
        lassign [check_aof [file join [aof_dir] appendonly.aof.manifest]] rc checked
        assert_equal 2 $rc
        assert_match "*$incr: cannot open*The AOF could not be read*" $checked
        file delete -force [aof_dir]
        restart_server
        assert_equal 0 [r dbsize]
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {What a crash left in the log's directory goes at the next start; the listed files and others' stay} {
        r set kept 1
        set listed [aof_listed]
        kill_server
        # As a kill -9 leaves them: a rewrite's unfinished base (a copy of
        # the dataset), a manifest never renamed, an increment opened just
        # before the crash; each must be neither loaded nor kept.
        proc plant {name text} {
            set f [open [file join [aof_dir] $name] w]
            fconfigure $f -translation binary
            puts -nonewline $f $text
            close $f
        }
        set stray "*2\r\n\$3\r\nDEL\r\n\$4\r\nkept\r\n"
        # A pid above any pid_max: that child is surely gone. One of a live
        # process (this test's) may be another server's rewrite in progress
        # (a directory shared under another appendfilename): it stays.
        plant temp-rewriteaof-bg-2147483647.aof [string repeat x 100000]
        plant temp-rewriteaof-bg-[pid].aof "in progress"
        plant temp-manifest "file x seq 1 type i\n"
        plant appendonly.aof.900.incr.aof $stray
        plant notes.txt "not ours"
        restart_server
        assert_equal 1 [r get kept]
        set files [aof_files]
        foreach gone {temp-rewriteaof-bg-2147483647.aof temp-manifest appendonly.aof.900.incr.aof} {
            assert {$gone ni $files}
        }
        assert {"notes.txt" in $files}
        assert {"temp-rewriteaof-bg-[pid].aof" in $files}
        foreach f $listed { assert {$f in $files} }
        set log [exec cat [srv 0 stdout]]
        assert_match "*removed temp-rewriteaof-bg-2147483647.aof, left unfinished by a crash*" $log
        assert_match "*removed appendonly.aof.900.incr.aof, a file the manifest does not list*" $log
        restart_server 0 kill
        assert_equal 1 [r get kept]
    }
}

start_server {overrides {appendonly yes appendfsync everysec auto-aof-rewrite-percentage 0}} {
    test {BGREWRITEAOF while writes go on: base plus the increment since the fork, old files gone, nothing lost} {
        for {set i 0} {$i < 500} {incr i} { r set k:$i v0:$i }
        for {set i 0} {$i < 500} {incr i} { r set k:$i v1:$i }
        set old [aof_listed]
        set rd [redis_deferring_client]
        assert_match "*started*" [r bgrewriteaof]
        # Writes continue during the rewrite, on another connection.
        for {set i 0} {$i < 500} {incr i} { $rd set k:$i v2:$i }
        for {set i 0} {$i < 500} {incr i} { $rd read }
        $rd close
        wait_rewrite_done 1
        assert_equal ok [aof_field aof_last_bgrewrite_status]
        set base [aof_listed b]
        assert_equal 1 [llength $base]
        foreach f $old { assert {$f ni [aof_files]} }
        assert_equal [lsort [concat [aof_listed] appendonly.aof.manifest]] [aof_files]
        assert_error {*already in progress*} {
            r bgrewriteaof
            r bgrewriteaof
        }
        wait_rewrite_done 2
        restart_server 0 kill
        assert_equal 500 [r dbsize]
        for {set i 0} {$i < 500} {incr i 7} { assert_equal v2:$i [r get k:$i] }
    }

    test {Automatic rewrites keep the log bounded under overwrites} {
        r flushall
        r config set auto-aof-rewrite-min-size 200kb
        r config set auto-aof-rewrite-percentage 100
        set value [string repeat v 1000]
        set before [aof_field aof_rewrites]
        for {set i 0} {$i < 3000} {incr i} { r set hot:[expr {$i % 10}] $value }
        # 3000 writes of 1 KB went in; the log comes down to about ten keys'
        # worth plus what was written since the last rewrite, not 3 MB. A
        # slow build's loop can outrun a rewrite: the one after it brings
        # the size down, so the wait is for both.
        wait_for_condition 200 50 {
            [aof_field aof_rewrites] > $before && [aof_field aof_rewrite_in_progress] == 0 &&
            [aof_field aof_current_size] < 1000000
        } else { fail "no automatic rewrite brought the log under 1 MB: [r info persistence]" }
        r config set auto-aof-rewrite-percentage 0
    }
}

start_server {overrides {appendonly yes appendfsync everysec auto-aof-rewrite-percentage 0}} {
    test {A value freed and written over while the rewrite copies it: the base still passes its own checks} {
        # The pool is shared memory: the child sees the parent reuse a
        # freed extent. It used to checksum one read of a large value and
        # write another, so the new base failed its CRC64 at the next start.
        r set big [pattern_bytes 1048576 5]
        r set small s
        r debug aof-rewrite-delay 1500 ;# the child waits before it copies big
        r bgrewriteaof
        r del big
        # Same size: the next SET takes big's extent as it was freed.
        set other [pattern_bytes 1048576 9]
        r set other $other
        wait_rewrite_done 1
        r debug aof-rewrite-delay 0
        assert_equal ok [aof_field aof_last_bgrewrite_status]
        lassign [check_aof [file join [aof_dir] appendonly.aof.manifest]] rc checked
        assert_equal 0 $rc $checked
        restart_server 0 kill
        assert_equal 0 [r exists big]
        assert_equal s [r get small]
        assert_equal $other [r get other]
    }
    test {A rewrite child dies with its server (kill -9): none is left writing a copy} {
        r set big [pattern_bytes 1048576 5]
        r debug aof-rewrite-delay 60000 ;# the child waits before it copies big
        set off [file size [srv 0 stdout]]
        r bgrewriteaof
        set child ""
        wait_for_condition 100 50 {
            [regexp {rewriting started by pid (\d+)} [string range [exec cat [srv 0 stdout]] $off end] -> child]
        } else { fail "the log names no rewrite child" }
        assert {[process_is_alive $child]}
        # Before, the orphan also held the listening sockets: the restart
        # failed ("server exited during startup") until it was done.
        if {[catch {restart_server 0 kill} e]} {
            catch {exec kill -9 $child}
            error $e
        }
        wait_for_condition 100 50 {![process_is_alive $child]} else {
            catch {exec kill -9 $child}
            fail "rewrite child $child outlived its server"
        }
        r del big
        r set small s
    }
    test {A store object freed and zeroed while the rewrite copies it: the same} {
        aof_put obj [pattern_bytes 1048576 6]
        r debug aof-rewrite-delay 1500
        r bgrewriteaof
        r remove obj
        r debug zerofree drain ;# its extent is zero now
        wait_rewrite_done 1
        r debug aof-rewrite-delay 0
        lassign [check_aof [file join [aof_dir] appendonly.aof.manifest]] rc checked
        assert_equal 0 $rc $checked
        restart_server 0 kill
        assert_equal 0 [r exists obj]
        assert_equal s [r get small]
    }
}

start_server {overrides {appendonly no}} {
    test {CONFIG SET appendonly yes: the dataset becomes the base, and survives a kill -9} {
        for {set i 0} {$i < 100} {incr i} { r set pre:$i $i }
        assert_equal 0 [aof_field aof_enabled]
        assert_error {*appendonly is no*} {r bgrewriteaof}
        r config set appendonly yes
        wait_rewrite_done 1
        r set post 1
        r config rewrite
        restart_server 0 kill
        assert_equal 101 [r dbsize]
        assert_equal 42 [r get pre:42]
        r config set appendonly no
        assert_equal 0 [aof_field aof_enabled]
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {An object only in a client segment is not resurrected, nor an older version of its key} {
        r mount aofseg 1mb OWNER aofowner
        r set k pool-version
        # The new version goes to the mounted segment only (no bytes here).
        set reps [r put.start k 100 REPLACE PREFER aofseg REPLICAS 1]
        assert_equal [dict get [r segment.info aofseg] id] [lindex $reps 0 0]
        assert_equal OK [r put.end k]
        assert_equal 1 [aof_field aof_segment_objects_not_logged]
        restart_server 0 kill
        assert_equal 0 [r exists k]
    }
}

start_server {overrides {appendonly yes appendfsync everysec}} {
    test {A log that cannot be written: writes answer MISCONF, reads go on, and the write is kept for the retry} {
        r set a 1
        r debug aof-write-error ENOSPC
        # This write's log write fails: as Redis under everysec, its reply
        # is sent; the record stays in the buffer, tried again later.
        assert_equal OK [r set b 2]
        assert_equal err [aof_field aof_last_write_status]
        assert_error {MISCONF*AOF*} {r set c 3}
        assert_error {MISCONF*} {r put.start c 10}
        assert_equal 1 [r get a]
        r debug aof-write-error OFF
        wait_for_condition 100 20 {[aof_field aof_last_write_status] eq "ok"} else { fail "the log stays unwritable" }
        assert_equal OK [r set c 3]
        restart_server 0 kill
        assert_equal {1 2 3} [r mget a b c]
        assert_match "*AOF: write error: No space left on device*AOF: writes succeed again*" [exec cat [srv 0 stdout]]
    }
}

start_server {overrides {appendonly yes appendfsync everysec}} {
    test {SHUTDOWN while the log cannot take an acknowledged write: refused, the server goes on; FORCE exits} {
        r debug aof-write-error ENOSPC
        # Acknowledged (everysec), in the buffer only: exiting would lose it.
        assert_equal OK [r set held 1]
        assert_error {*Errors trying to SHUTDOWN*} {r shutdown}
        assert_equal 1 [r get held]
        assert_equal 1 [process_is_alive [srv 0 pid]]
        assert_match "*cannot take the writes acknowledged since its last good write*refusing to exit*" \
            [exec cat [srv 0 stdout]]
        # Once the disk takes it, SHUTDOWN exits, and the write is there.
        r debug aof-write-error OFF
        wait_for_condition 100 20 {[aof_field aof_last_write_status] eq "ok"} else { fail "the log stays unwritable" }
        catch {r shutdown}
        assert_equal 1 [server_exited]
        restart_server
        assert_equal 1 [r get held]
        # FORCE exits even so, as Redis's.
        r debug aof-write-error ENOSPC
        assert_equal OK [r set lost 1]
        catch {r shutdown force}
        assert_equal 1 [server_exited]
        restart_server
        assert_equal 1 [r get held]
    }
}

start_server {overrides {appendonly yes appendfsync everysec}} {
    test {An fsync that fails under everysec refuses writes (MISCONF) until one succeeds, as Redis} {
        r set a 1
        # The kernel reports a writeback error once and may drop the pages:
        # what was written may never reach the disk.
        r debug aof-fsync-error EIO
        wait_for_condition 100 50 {[aof_field aof_last_write_status] eq "err"} else {
            fail "a failed fsync left writes accepted"
        }
        assert_error {MISCONF*AOF*} {r set b 2}
        assert_equal 1 [r get a]
        r debug aof-fsync-error OFF
        wait_for_condition 100 50 {[aof_field aof_last_write_status] eq "ok"} else { fail "no fsync succeeded" }
        assert_equal OK [r set c 3]
        assert_match "*AOF: fsync failed (Input/output error): writes are refused*AOF: fsync succeeds again*" \
            [exec cat [srv 0 stdout]]
        restart_server 0 kill
        assert_equal {1 {} 3} [r mget a b c]
    }
}

start_server {overrides {appendonly yes appendfsync everysec}} {
    test {A large value written from the pool: a write that fails keeps the rest of its record for the retry} {
        set big [pattern_bytes 1048576 11]
        r set before [string repeat b 300000]
        r debug aof-write-error ENOSPC
        assert_equal OK [r set big $big]
        assert_equal err [aof_field aof_last_write_status]
        assert_morethan [aof_field aof_buffer_length] 1048576
        r debug aof-write-error OFF
        wait_for_condition 100 20 {[aof_field aof_last_write_status] eq "ok"} else { fail "the log stays unwritable" }
        assert_equal 0 [aof_field aof_buffer_length]
        restart_server 0 kill
        assert_equal $big [r get big]
        assert_equal 300000 [r strlen before]
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {appendfsync always and a log that cannot be written: the server exits before acknowledging} {
        r set kept 1
        r debug aof-write-error EIO
        set rd [redis_deferring_client]
        $rd set lost 1
        # No reply: the connection closes as the server exits.
        assert_error {*} {$rd read}
        $rd close
        assert_equal 1 [server_exited]
        assert_match "*cannot write the log with appendfsync always: exiting*" [exec cat [srv 0 stdout]]
        restart_server
        assert_equal 1 [r get kept]
        assert_equal 0 [r exists lost]
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {BGREWRITEAOF that cannot open an increment: a clear error, the reason in the log, the log goes on} {
        r set a 1
        # Every name the next increment could take is taken (as a directory
        # the server may not write would refuse it, which root cannot show).
        set seq [lindex [split [lindex [aof_listed i] end] .] 2]
        for {set i 1} {$i <= 1000} {incr i} {
            close [open [file join [aof_dir] appendonly.aof.[expr {$seq + $i}].incr.aof] w]
        }
        assert_error {*cannot open a new AOF increment (see the log)*} {r bgrewriteaof}
        assert_match "*AOF: cannot open a new increment in appendonlydir for a rewrite: File exists*" \
            [exec cat [srv 0 stdout]]
        assert_equal OK [r set b 2]
        for {set i 1} {$i <= 1000} {incr i} {
            file delete [file join [aof_dir] appendonly.aof.[expr {$seq + $i}].incr.aof]
        }
        restart_server 0 kill
        assert_equal {1 2} [r mget a b]
    }
}

start_server {overrides {appendonly yes appendfsync always}} {
    test {A log of many increments (a server restarted often) is rewritten at start, before the manifest fills} {
        r set a 1
        kill_server
        # 150 starts that wrote nothing: each left an increment of its header alone.
        set man [aof_manifest]
        set hdr "*2\r\n\$10\r\nAOF.FORMAT\r\n\$1\r\n2\r\n"
        for {set seq 1000} {$seq < 1150} {incr seq} {
            aof_write [file join [aof_dir] appendonly.aof.$seq.incr.aof] $hdr
            append man "file appendonly.aof.$seq.incr.aof seq $seq type i\n"
        }
        aof_write [file join [aof_dir] appendonly.aof.manifest] $man
        restart_server
        assert_equal 1 [r get a]
        wait_rewrite_done 1
        assert_match "*files in the manifest: rewriting the log into one base*" [exec cat [srv 0 stdout]]
        assert_lessthan [llength [aof_listed]] 3
        restart_server 0 kill
        assert_equal 1 [r get a]
    }
}

test {appenddirname and appendfilename name plain files in dir} {
    lassign [run_server_expecting_exit --port [find_available_port] --appendonly yes --appenddirname ../escape] exited out
    assert_equal 1 $exited
    assert_match "*must be plain names*" $out
}

test {mooncake-check-aof: usage, a missing file} {
    lassign [check_aof] rc out
    assert_equal 2 $rc
    assert_match "*Usage*" $out
    lassign [check_aof /nonexistent/appendonly.aof.manifest] rc out
    assert_equal 2 $rc
    assert_match "*cannot open*" $out
    # An unknown option is named as one (it was opened as a file: "cannot
    # open"), and --help is an answer, on stdout, not a misuse.
    lassign [check_aof --fxi /nonexistent/appendonly.aof.manifest] rc out
    assert_equal 2 $rc
    assert_match "mooncake-check-aof: unknown option --fxi\nUsage*" $out
    assert_equal 0 [catch {exec $::check_aof --help 2>/dev/null} out]
    assert_match "Usage: mooncake-check-aof*" $out
}

test {mooncake-check-aof: a directory or a device is unreadable (2), never valid} {
    # A directory named *.manifest read as an empty manifest: "0 files",
    # "The AOF is valid", 0. /dev/null (size 0) was a valid AOF file.
    set base [file join $::env(TMPDIR) check_aof_dirs]
    set dir [file join $base appendonly.aof.manifest]
    file mkdir $dir
    set got {}
    foreach path [list $dir $base /dev/null] {
        lassign [check_aof $path] rc out
        lappend got $rc [expr {[string match "*valid*" $out] && ![string match "*not a valid*" $out]}]
    }
    file delete -force $base
    set got
} {2 0 2 0 2 0}

}
