# A Ruby job runner: THREADS worker threads take JOBS jobs from a queue; each job builds a batch of
# records, serialises it to JSON, parses it back and keeps only a small result. Ruby's strings and
# arrays are malloc'd by whichever thread makes them, so under glibc each thread gets an arena of its
# own, and what one frees the others cannot reuse.
# Usage: ruby jobrunner.rb [THREADS] [JOBS]; prints the results' checksum and its VmRSS at the end.
require "json"

threads = (ARGV[0] || 16).to_i
jobs = (ARGV[1] || 160).to_i
queue = Queue.new
jobs.times { |i| queue << i }
threads.times { queue << nil }
results = Queue.new
workers = Array.new(threads) do
  Thread.new do
    while (i = queue.pop)
      rows = Array.new((ENV["ROWS"] || 1000).to_i) do |k|
        { "id" => k, "name" => "job#{i}-row#{k}-" * 6, "vals" => Array.new(12) { |j| (i * k + j) % 997 } }
      end
      text = JSON.generate(rows)
      parsed = JSON.parse(text)
      results << [i, parsed.sum { |r| r["vals"].sum }, text.bytesize]
    end
  end
end
workers.each(&:join)
out = []
out << results.pop until results.empty?
out.sort!
rss = File.foreach("/proc/self/status").find { |l| l.start_with?("VmRSS:") }.split[1]
puts "jobs #{out.size} checksum #{out.sum { |_, s, b| s + b }}"
puts "rss_kb #{rss}"
