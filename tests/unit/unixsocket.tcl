# The unix socket, the way to the fast (shared-memory) data path, is on in
# the shipped mooncake.conf with owner-only permissions; start-up neither
# steals a live server's socket nor deletes a file that is not a socket, and
# replaces one left by a server that died. `make run` runs from a copy of
# mooncake.conf, so CONFIG REWRITE never edits the tracked file.

set ::usock_conf [file join $::harness(root) mooncake.conf]

proc usock_conf_value {name} {
    foreach pair [__read_config__ $::usock_conf] {
        lassign $pair directive line
        if {$directive eq $name} { return [lindex $line 1] }
    }
    return ""
}

# Start a server outside start_server on this unix socket only; returns its
# pid once it answers PING there, or fails with its output.
proc usock_start {sock out} {
    set pid [exec $::harness(binary) --port 0 --unixsocket $sock --segment-size 16mb \
                 --segment-prefault no >& $out &]
    wait_for_condition 100 50 {
        [catch {exec redis-cli -s $sock ping} reply] == 0 && $reply eq "PONG"
    } else {
        catch {exec kill -9 $pid}
        fail "server on $sock did not come up: [lifecycle_text $out]"
    }
    return $pid
}

proc lifecycle_text {path} {
    if {![file exists $path]} { return "" }
    set f [open $path r]
    set t [read $f]
    close $f
    return $t
}

test {The shipped mooncake.conf turns the unix socket on, owner-only} {
    assert_equal /tmp/mooncake.sock [usock_conf_value unixsocket] ;# tmpfiles: not a file, the shipped setting
    assert_equal 700 [usock_conf_value unixsocketperm]
}

start_server [list config_file $::usock_conf tags {unixsocket}] {
    test {A server started from mooncake.conf creates its socket with mode 0700} {
        set sock [srv 0 unixsocket]
        assert {[file exists $sock]}
        assert_equal socket [file type $sock]
        assert_equal 700 [format %o [expr {[file attributes $sock -permissions] & 0777}]]
        assert_equal {unixsocketperm 700} [r config get unixsocketperm]
    }

    test {Same-host TCP clients are told the unix socket (shared memory reaches them)} {
        set info [r segment.info self]
        assert_match "*unix://[srv 0 unixsocket]*" $info
    }
}

test {A second server on a live server's unix socket refuses to start; the first keeps it} {
    set dir [file normalize [tmpfile usock]]
    file mkdir $dir
    set sock [file join $dir s.sock]
    set pid [usock_start $sock [file join $dir first.out]]
    lassign [run_server_expecting_exit --port 0 --unixsocket $sock --segment-size 16mb] exited out
    set alive [process_is_alive $pid]
    set reply [exec redis-cli -s $sock ping]
    catch {exec kill $pid}
    wait_for_condition 100 50 {![process_is_alive $pid]} else { fail "server did not stop" }
    file delete -force $dir
    assert_equal 1 $exited
    assert_match "*another server is listening there*" $out
    assert_equal 1 $alive
    assert_equal PONG $reply
}

test {A file that is not a socket is never removed to make room for one} {
    set path [file normalize [tmpfile usock-notasocket]]
    set f [open $path w]
    puts $f "precious"
    close $f
    lassign [run_server_expecting_exit --port 0 --unixsocket $path --segment-size 16mb] exited out
    set kept [lifecycle_text $path]
    file delete $path
    assert_equal 1 $exited
    assert_match "*exists and is not a socket*" $out
    assert_equal "precious\n" $kept
}

test {A socket left by a server that was killed is replaced at start-up} {
    set dir [file normalize [tmpfile usock-stale]]
    file mkdir $dir
    set sock [file join $dir s.sock]
    set pid [usock_start $sock [file join $dir first.out]]
    exec kill -9 $pid
    wait_for_condition 100 50 {![process_is_alive $pid]} else { fail "server did not die" }
    assert_equal socket [file type $sock]
    set pid2 [usock_start $sock [file join $dir second.out]]
    set reply [exec redis-cli -s $sock ping]
    exec kill $pid2
    wait_for_condition 100 50 {![process_is_alive $pid2]} else { fail "server did not stop" }
    set gone [expr {![file exists $sock]}]
    file delete -force $dir
    assert_equal PONG $reply
    assert_equal 1 $gone
}

test {A start-up that fails after the unix socket is bound removes the socket file} {
    # A busy http-port is found after the unix socket is made (the HTTP
    # daemon starts last), as are a pool the machine cannot hold and a
    # damaged AOF; each such refusal used to leave the file behind.
    set dir [file normalize [tmpfile usock-failed-start]]
    file mkdir $dir
    set sock [file join $dir s.sock]
    set busy [socket -server {apply {{ch args} {close $ch}}} -myaddr 127.0.0.1 0]
    set hport [lindex [fconfigure $busy -sockname] 2]
    lassign [run_server_expecting_exit --port 0 --unixsocket $sock --segment-size 16mb \
                 --segment-prefault no --http-port $hport] exited out
    close $busy
    set left [file exists $sock]
    file delete -force $dir
    assert_equal 1 $exited
    assert_match "*Failed listening for HTTP*" $out
    assert_equal 0 $left
}

test {make run starts the server from a copy of mooncake.conf, with ARGS appended} {
    # -n prints the commands without running the server (nor the build);
    # -W: as if mooncake.conf had just been edited, so the copy is refreshed.
    set out [exec make -n -s -W mooncake.conf -C $::harness(root) run {ARGS=--port 7000 --loglevel verbose} 2>@1]
    assert_match "*cp mooncake.conf build/mooncake.conf*" $out
    assert_match "*./src/mooncake-server build/mooncake.conf --port 7000 --loglevel verbose*" $out
}
