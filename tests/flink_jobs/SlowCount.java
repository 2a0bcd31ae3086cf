// A Flink job for tests/test_flink_cluster.py: two subtasks (one per TaskManager, the cluster
// spreads slots evenly), each counting 50 numbers at 10 a second, so that a TaskManager can be
// killed while its subtask runs and the restart strategy of the generated flink-conf.yaml seen
// at work. Compiled by the test against flink-dist (javac), never shipped.
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.DiscardingSink;

public class SlowCount {
  public static void main(String[] args) throws Exception {
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(2);
    env.fromSequence(0, 99)
        .map(x -> { Thread.sleep(100); return x; }).returns(Types.LONG)
        .addSink(new DiscardingSink<>());
    env.execute("slow-count");
  }
}
